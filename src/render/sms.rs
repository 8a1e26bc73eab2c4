//! SMS encoding analysis: decides whether a message can travel as GSM-7 or
//! must fall back to UCS-2, and how many billable segments it will occupy.
//!
//! Carriers bill per segment, and a single "smart" character (a curly quote
//! pasted from a word processor, an emoji) silently switches the whole
//! message to UCS-2 and more than halves the per-segment capacity. This
//! module exists so that authors can see that cost, and which characters
//! caused it, before a message is sent.
//!
//! Only `std` is used so the file can be dropped into any crate as is.

use std::fmt::Write as _;

/// Wire encoding an SMS will be sent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Gsm7,
    Ucs2,
}

impl Encoding {
    /// Human-facing label; these are the names used by carriers and SMS
    /// gateway dashboards, so authors recognise them.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Gsm7 => "GSM-7",
            Encoding::Ucs2 => "UCS-2",
        }
    }
}

/// A character that has no GSM-7 representation and therefore forced the
/// message into UCS-2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Culprit {
    pub ch: char,
    /// Index in `char`s (not bytes), 0-based, so it can be shown to a person
    /// or used to highlight the character in an editor.
    pub position: usize,
}

impl Culprit {
    /// Code point in `U+XXXX` notation: many culprits (U+2019 vs U+0027,
    /// U+00A0 vs U+0020) look identical to the character the author meant,
    /// so the glyph alone does not explain the problem.
    pub fn code_point(&self) -> String {
        let mut out = String::with_capacity(8);
        // Writing to a String cannot fail.
        let _ = write!(out, "U+{:04X}", u32::from(self.ch));
        out
    }
}

/// Result of [`analyse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmsAnalysis {
    pub encoding: Encoding,
    /// Number of SMS segments the carrier will send (and bill).
    /// An empty text is reported as 0 segments: there is nothing to send, and
    /// callers should reject or skip empty messages rather than be told they
    /// cost one segment.
    pub segments: u32,
    /// Septets for GSM-7 (extension characters count 2), UTF-16 code units
    /// for UCS-2 (characters outside the BMP count 2).
    pub units: u32,
    /// Every occurrence, in order, of a character that forced UCS-2.
    /// Empty if and only if the encoding is GSM-7.
    pub culprits: Vec<Culprit>,
}

/// Placeholder for code 0x1B in [`GSM7_BASIC`]. That code is the escape to
/// the extension table, not a character, so it must never match input text;
/// U+001B itself is not representable in GSM-7.
const GSM7_ESCAPE_SLOT: char = '\u{1B}';

/// 3GPP TS 23.038 §6.2.1 default alphabet, indexed by its 7-bit code so the
/// table can be checked line by line against the standard. Note the easily
/// confused entries: 0x02 is `$` but 0x24 is `¤`, 0x40 is `¡` (not `@`, which
/// is 0x00), 0x09 is capital `Ç`, and the Greek letters are the Greek
/// capitals (e.g. Ω is U+03A9, not the ohm sign U+2126).
const GSM7_BASIC: [char; 128] = [
    // 0x00
    '@',
    '£',
    '$',
    '¥',
    'è',
    'é',
    'ù',
    'ì',
    'ò',
    'Ç',
    '\n',
    'Ø',
    'ø',
    '\r',
    'Å',
    'å',
    // 0x10
    'Δ',
    '_',
    'Φ',
    'Γ',
    'Λ',
    'Ω',
    'Π',
    'Ψ',
    'Σ',
    'Θ',
    'Ξ',
    GSM7_ESCAPE_SLOT,
    'Æ',
    'æ',
    'ß',
    'É',
    // 0x20
    ' ',
    '!',
    '"',
    '#',
    '¤',
    '%',
    '&',
    '\'',
    '(',
    ')',
    '*',
    '+',
    ',',
    '-',
    '.',
    '/',
    // 0x30
    '0',
    '1',
    '2',
    '3',
    '4',
    '5',
    '6',
    '7',
    '8',
    '9',
    ':',
    ';',
    '<',
    '=',
    '>',
    '?',
    // 0x40
    '¡',
    'A',
    'B',
    'C',
    'D',
    'E',
    'F',
    'G',
    'H',
    'I',
    'J',
    'K',
    'L',
    'M',
    'N',
    'O',
    // 0x50
    'P',
    'Q',
    'R',
    'S',
    'T',
    'U',
    'V',
    'W',
    'X',
    'Y',
    'Z',
    'Ä',
    'Ö',
    'Ñ',
    'Ü',
    '§',
    // 0x60
    '¿',
    'a',
    'b',
    'c',
    'd',
    'e',
    'f',
    'g',
    'h',
    'i',
    'j',
    'k',
    'l',
    'm',
    'n',
    'o',
    // 0x70
    'p',
    'q',
    'r',
    's',
    't',
    'u',
    'v',
    'w',
    'x',
    'y',
    'z',
    'ä',
    'ö',
    'ñ',
    'ü',
    'à',
];

/// 3GPP TS 23.038 §6.2.1.1 default extension table. Each of these is sent as
/// ESC followed by the character's code, which is why they cost 2 septets.
/// (National language shift tables are not used: most carriers and handsets
/// do not support them, so relying on them would be unsafe.)
const GSM7_EXTENSION: [char; 10] = ['\u{0C}', '^', '{', '}', '\\', '[', '~', ']', '|', '€'];

/// Capacity rules for one encoding. A message that fits the single limit is
/// sent as one SMS; anything longer needs a User Data Header for
/// concatenation, which eats into every segment, hence the smaller limit.
#[derive(Debug, Clone, Copy)]
struct SegmentLimits {
    single: u32,
    concatenated: u32,
}

/// 140 octets = 160 septets; the 6-octet concatenation UDH leaves 153.
const GSM7_LIMITS: SegmentLimits = SegmentLimits { single: 160, concatenated: 153 };

/// 140 octets = 70 UTF-16 units; the 6-octet concatenation UDH leaves 67.
const UCS2_LIMITS: SegmentLimits = SegmentLimits { single: 70, concatenated: 67 };

/// Septets `ch` costs in GSM-7, or `None` if GSM-7 cannot carry it.
/// Returning the cost rather than a bool keeps the table lookup and the
/// pricing rule in one place.
fn gsm7_septets(ch: char) -> Option<u32> {
    if ch != GSM7_ESCAPE_SLOT && GSM7_BASIC.contains(&ch) {
        Some(1)
    } else if GSM7_EXTENSION.contains(&ch) {
        Some(2)
    } else {
        None
    }
}

/// UTF-16 code units `ch` costs in UCS-2. Characters outside the BMP cannot
/// strictly be encoded in UCS-2, but in practice gateways and handsets send
/// them as UTF-16 surrogate pairs, so that is what gets billed.
fn ucs2_units(ch: char) -> u32 {
    // len_utf16 is 1 or 2, so the cast is lossless.
    ch.len_utf16() as u32
}

/// Every character GSM-7 cannot carry, with its char index. All occurrences
/// are reported, not just the first, so an author can fix them in one pass.
fn find_culprits(text: &str) -> Vec<Culprit> {
    text.chars()
        .enumerate()
        .filter(|&(_, ch)| gsm7_septets(ch).is_none())
        .map(|(position, ch)| Culprit { ch, position })
        .collect()
}

/// Number of concatenated segments needed for characters of the given widths.
/// A character is never split across segments (an escape pair or a surrogate
/// pair torn in half would be garbled on the handset), so when it does not
/// fit in the remaining space, the space is wasted and it starts a new one.
fn pack_segments(widths: impl Iterator<Item = u32>, capacity: u32) -> u32 {
    let mut segments = 1;
    let mut used = 0;
    for width in widths {
        if used + width > capacity {
            segments += 1;
            used = 0;
        }
        used += width;
    }
    segments
}

/// Total units and segment count for characters of the given widths.
/// Units are summed saturating so absurdly large input cannot panic.
fn measure(widths: impl Iterator<Item = u32> + Clone, limits: SegmentLimits) -> (u32, u32) {
    let units = widths.clone().fold(0, u32::saturating_add);
    let segments = match units {
        0 => 0,
        u if u <= limits.single => 1,
        _ => pack_segments(widths, limits.concatenated),
    };
    (units, segments)
}

/// Decides the encoding of `text` and how many units and segments it costs.
///
/// GSM-7 is chosen whenever possible because it carries more than twice as
/// many characters per segment; one unsupported character anywhere forces
/// the whole message to UCS-2, since an SMS has a single encoding.
pub fn analyse(text: &str) -> SmsAnalysis {
    let culprits = find_culprits(text);
    let (encoding, (units, segments)) = if culprits.is_empty() {
        // Every char is known to be in the tables, so the fallback is unused.
        let widths = text.chars().map(|ch| gsm7_septets(ch).unwrap_or(1));
        (Encoding::Gsm7, measure(widths, GSM7_LIMITS))
    } else {
        (Encoding::Ucs2, measure(text.chars().map(ucs2_units), UCS2_LIMITS))
    };
    SmsAnalysis { encoding, segments, units, culprits }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repeat(s: &str, n: usize) -> String {
        s.repeat(n)
    }

    #[test]
    fn encoding_labels() {
        assert_eq!(Encoding::Gsm7.as_str(), "GSM-7");
        assert_eq!(Encoding::Ucs2.as_str(), "UCS-2");
    }

    #[test]
    fn code_point_format() {
        let c = |ch| Culprit { ch, position: 0 }.code_point();
        assert_eq!(c('\u{2019}'), "U+2019");
        assert_eq!(c('é'), "U+00E9");
        assert_eq!(c('\u{1}'), "U+0001");
        assert_eq!(c('😀'), "U+1F600");
        assert_eq!(c('\u{10FFFF}'), "U+10FFFF");
        assert_eq!(c('\u{ABCD}'), "U+ABCD");
    }

    #[test]
    fn empty_text_is_gsm7_with_zero_segments() {
        let a = analyse("");
        assert_eq!(a.encoding, Encoding::Gsm7);
        assert_eq!(a.units, 0);
        assert_eq!(a.segments, 0);
        assert!(a.culprits.is_empty());
    }

    #[test]
    fn ascii_160_is_one_segment_161_is_two() {
        let a = analyse(&repeat("a", 160));
        assert_eq!((a.encoding, a.units, a.segments), (Encoding::Gsm7, 160, 1));
        let a = analyse(&repeat("a", 161));
        assert_eq!((a.encoding, a.units, a.segments), (Encoding::Gsm7, 161, 2));
    }

    #[test]
    fn ascii_concatenated_boundaries() {
        assert_eq!(analyse(&repeat("x", 306)).segments, 2);
        assert_eq!(analyse(&repeat("x", 307)).segments, 3);
        assert_eq!(analyse(&repeat("x", 459)).segments, 3);
        assert_eq!(analyse(&repeat("x", 460)).segments, 4);
    }

    #[test]
    fn whole_basic_table_is_gsm7_one_septet_each() {
        for ch in GSM7_BASIC.iter().copied().filter(|&c| c != GSM7_ESCAPE_SLOT) {
            let a = analyse(&ch.to_string());
            assert_eq!(a.encoding, Encoding::Gsm7, "{ch:?}");
            assert_eq!(a.units, 1, "{ch:?}");
        }
        let mut unique: Vec<char> = GSM7_BASIC.to_vec();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 128, "basic table has duplicates");
    }

    #[test]
    fn basic_table_spot_checks_against_standard() {
        assert_eq!(GSM7_BASIC[0x00], '@');
        assert_eq!(GSM7_BASIC[0x02], '$');
        assert_eq!(GSM7_BASIC[0x09], 'Ç');
        assert_eq!(GSM7_BASIC[0x10], '\u{0394}');
        assert_eq!(GSM7_BASIC[0x15], '\u{03A9}');
        assert_eq!(GSM7_BASIC[0x24], '¤');
        assert_eq!(GSM7_BASIC[0x40], '¡');
        assert_eq!(GSM7_BASIC[0x41], 'A');
        assert_eq!(GSM7_BASIC[0x60], '¿');
        assert_eq!(GSM7_BASIC[0x61], 'a');
        assert_eq!(GSM7_BASIC[0x7F], 'à');
    }

    #[test]
    fn lookalikes_outside_the_table_force_ucs2() {
        // Lower-case ç, ohm sign, Latin á, backtick and ESC itself are not in
        // the default alphabet even though neighbours are.
        for ch in ['ç', '\u{2126}', 'á', '`', '\u{1B}', '\t', '\u{A0}'] {
            assert_eq!(analyse(&ch.to_string()).encoding, Encoding::Ucs2, "{ch:?}");
        }
    }

    #[test]
    fn euro_and_other_extension_chars_count_two() {
        let a = analyse("€");
        assert_eq!((a.encoding, a.units, a.segments), (Encoding::Gsm7, 2, 1));
        for ch in GSM7_EXTENSION {
            let a = analyse(&format!("a{ch}b"));
            assert_eq!(a.encoding, Encoding::Gsm7, "{ch:?}");
            assert_eq!(a.units, 4, "{ch:?}");
        }
        let a = analyse("^{}\\[~]|€\u{0C}");
        assert_eq!(a.units, 20);
    }

    #[test]
    fn eighty_euros_fit_one_segment_eighty_one_do_not() {
        assert_eq!(analyse(&repeat("€", 80)).segments, 1);
        let a = analyse(&repeat("€", 81));
        assert_eq!((a.units, a.segments), (162, 2));
    }

    #[test]
    fn escape_pair_is_not_split_at_153_boundary() {
        // 152 septets then an escape pair: only 1 septet remains in segment
        // 1, so the pair moves to segment 2; 153 + 153 septets of text would
        // otherwise fit in 2 segments exactly.
        let text = format!("{}€{}", repeat("a", 152), repeat("a", 152));
        let a = analyse(&text);
        assert_eq!(a.units, 306);
        assert_eq!(a.segments, 3);

        // Pair ending exactly at 153 fits.
        let text = format!("{}€{}", repeat("a", 151), repeat("a", 153));
        let a = analyse(&text);
        assert_eq!(a.units, 306);
        assert_eq!(a.segments, 2);
    }

    #[test]
    fn curly_apostrophe_forces_ucs2_with_position() {
        let a = analyse("Don\u{2019}t forget");
        assert_eq!(a.encoding, Encoding::Ucs2);
        assert_eq!(a.units, 12);
        assert_eq!(a.segments, 1);
        assert_eq!(a.culprits, vec![Culprit { ch: '\u{2019}', position: 3 }]);
        assert_eq!(a.culprits[0].code_point(), "U+2019");
    }

    #[test]
    fn culprit_positions_are_char_indices_and_every_occurrence() {
        // 'é' is GSM-7 but 2 bytes in UTF-8: positions must count chars.
        let a = analyse("é\u{2019}a\u{2019}😀");
        let got: Vec<(char, usize)> = a.culprits.iter().map(|c| (c.ch, c.position)).collect();
        assert_eq!(got, vec![('\u{2019}', 1), ('\u{2019}', 3), ('😀', 4)]);
        assert_eq!(a.units, 6);
    }

    #[test]
    fn devanagari_is_ucs2() {
        let text = "नमस्ते दुनिया";
        let a = analyse(text);
        assert_eq!(a.encoding, Encoding::Ucs2);
        assert_eq!(a.units, text.chars().count() as u32);
        assert_eq!(a.units, 13);
        assert_eq!(a.segments, 1);
        // Every char except the space is a culprit.
        assert_eq!(a.culprits.len(), 12);
        assert!(a.culprits.iter().all(|c| c.ch != ' '));
        assert_eq!(a.culprits[6].position, 7);
    }

    #[test]
    fn ucs2_70_is_one_segment_71_is_two() {
        let a = analyse(&repeat("\u{2019}", 70));
        assert_eq!((a.encoding, a.units, a.segments), (Encoding::Ucs2, 70, 1));
        let a = analyse(&repeat("\u{2019}", 71));
        assert_eq!((a.encoding, a.units, a.segments), (Encoding::Ucs2, 71, 2));
        // Mostly GSM text with one culprit uses UCS-2 limits for all of it.
        let a = analyse(&format!("{}\u{2019}", repeat("a", 70)));
        assert_eq!((a.units, a.segments), (71, 2));
        assert_eq!(analyse(&repeat("\u{2019}", 134)).segments, 2);
        assert_eq!(analyse(&repeat("\u{2019}", 135)).segments, 3);
    }

    #[test]
    fn emoji_counts_two_units() {
        let a = analyse("hi 😀");
        assert_eq!((a.encoding, a.units, a.segments), (Encoding::Ucs2, 5, 1));
        assert_eq!(a.culprits[0].code_point(), "U+1F600");
        assert_eq!(analyse(&repeat("😀", 35)).segments, 1);
        assert_eq!(analyse(&format!("{}a", repeat("😀", 35))).segments, 2);
    }

    #[test]
    fn surrogate_pair_is_not_split_at_67_boundary() {
        // 66 units, then an emoji: only 1 unit remains in segment 1.
        let text = format!("{}😀{}", repeat("\u{2019}", 66), repeat("\u{2019}", 66));
        let a = analyse(&text);
        assert_eq!(a.units, 134);
        assert_eq!(a.segments, 3);

        // Emoji ending exactly at unit 67 fits.
        let text = format!("{}😀{}", repeat("\u{2019}", 65), repeat("\u{2019}", 67));
        let a = analyse(&text);
        assert_eq!(a.units, 134);
        assert_eq!(a.segments, 2);
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        /// Basic set as listed in prose, independently of `GSM7_BASIC`.
        const REF_BASIC: &str = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà";
        const REF_EXT: &str = "\u{0C}^{}\\[~]|€";

        #[derive(Debug, PartialEq, Eq)]
        struct Reference {
            encoding: Encoding,
            units: u32,
            segments: u32,
        }

        /// Naive model: literally builds the list of segments char by char.
        fn reference(text: &str) -> Reference {
            let chars: Vec<char> = text.chars().collect();
            let gsm = chars.iter().all(|&c| REF_BASIC.contains(c) || REF_EXT.contains(c));
            let width = |c: char| -> u32 {
                if gsm {
                    if REF_EXT.contains(c) { 2 } else { 1 }
                } else if (c as u32) > 0xFFFF {
                    2
                } else {
                    1
                }
            };
            let units: u32 = chars.iter().map(|&c| width(c)).sum();
            let (single, multi) = if gsm { (160, 153) } else { (70, 67) };
            let segments = if chars.is_empty() {
                0
            } else if units <= single {
                1
            } else {
                let mut list: Vec<Vec<char>> = vec![Vec::new()];
                for &c in &chars {
                    let current: u32 = list.last().unwrap().iter().map(|&x| width(x)).sum();
                    if current + width(c) > multi {
                        list.push(Vec::new());
                    }
                    list.last_mut().unwrap().push(c);
                }
                list.len() as u32
            };
            Reference { encoding: if gsm { Encoding::Gsm7 } else { Encoding::Ucs2 }, units, segments }
        }

        fn basic_char() -> impl Strategy<Value = char> {
            prop::sample::select(REF_BASIC.chars().collect::<Vec<_>>())
        }

        fn ext_char() -> impl Strategy<Value = char> {
            prop::sample::select(REF_EXT.chars().collect::<Vec<_>>())
        }

        fn bmp_char() -> impl Strategy<Value = char> {
            prop_oneof![Just('\u{2019}'), Just('ç'), prop::char::range('\u{0100}', '\u{FFFD}'),]
        }

        fn astral_char() -> impl Strategy<Value = char> {
            prop::char::range('\u{10000}', '\u{10FFFF}')
        }

        fn gsm_char() -> impl Strategy<Value = char> {
            prop_oneof![6 => basic_char(), 1 => ext_char()]
        }

        fn any_char() -> impl Strategy<Value = char> {
            prop_oneof![
                20 => basic_char(),
                4 => ext_char(),
                1 => bmp_char(),
                1 => astral_char(),
            ]
        }

        /// Half pure GSM-7 text, half mixed, long enough to cross several
        /// segment boundaries in both encodings.
        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                prop::collection::vec(gsm_char(), 0..400),
                prop::collection::vec(any_char(), 0..400),
                prop::collection::vec(prop_oneof![3 => bmp_char(), 1 => astral_char(), 1 => basic_char()], 0..250),
            ]
            .prop_map(|v| v.into_iter().collect())
        }

        /// The prose listing and the code-ordered table must describe the
        /// same 127 characters (128 codes minus the escape).
        #[test]
        fn reference_tables_match_module_tables() {
            let mut prose: Vec<char> = REF_BASIC.chars().collect();
            prose.sort_unstable();
            prose.dedup();
            let mut table: Vec<char> = GSM7_BASIC.iter().copied().filter(|&c| c != GSM7_ESCAPE_SLOT).collect();
            table.sort_unstable();
            assert_eq!(prose.len(), 127);
            assert_eq!(prose, table);
            let mut ext: Vec<char> = REF_EXT.chars().collect();
            let mut module_ext = GSM7_EXTENSION.to_vec();
            ext.sort_unstable();
            module_ext.sort_unstable();
            assert_eq!(ext, module_ext);
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn agrees_with_reference(t in text()) {
                let a = analyse(&t);
                let r = reference(&t);
                prop_assert_eq!(
                    Reference { encoding: a.encoding, units: a.units, segments: a.segments },
                    r
                );
            }

            /// Any string at all, not only the classes above.
            #[test]
            fn agrees_with_reference_for_any_string(t in any::<String>()) {
                let a = analyse(&t);
                prop_assert_eq!(Reference { encoding: a.encoding, units: a.units, segments: a.segments }, reference(&t));
            }

            /// Text right at the limits: 160/153 GSM-7 units (an extension
            /// character straddling the boundary), 70/67 UCS-2 units (a
            /// surrogate pair straddling it).
            #[test]
            fn agrees_with_reference_at_the_limits(
                gsm_len in prop_oneof![150..=162_usize, 300..=310_usize, 455..=462_usize],
                ucs_len in prop_oneof![64..=72_usize, 130..=136_usize, 198..=203_usize],
                at in 0..1000_usize,
                ext in ext_char(),
                astral in astral_char(),
            ) {
                let mut gsm: Vec<char> = vec!['a'; gsm_len];
                gsm.insert(at % (gsm_len + 1), ext);
                let gsm: String = gsm.into_iter().collect();
                let mut ucs: Vec<char> = vec!['\u{2019}'; ucs_len];
                ucs.insert(at % (ucs_len + 1), astral);
                let ucs: String = ucs.into_iter().collect();
                for t in [gsm, ucs] {
                    let a = analyse(&t);
                    prop_assert_eq!(Reference { encoding: a.encoding, units: a.units, segments: a.segments }, reference(&t));
                }
            }

            #[test]
            fn segments_never_decrease_on_append(t in text(), c in any_char()) {
                let before = analyse(&t).segments;
                let after = analyse(&format!("{t}{c}")).segments;
                prop_assert!(after >= before, "{} -> {}", before, after);
                prop_assert!(after >= 1);
            }

            #[test]
            fn culprits_empty_iff_gsm7(t in text()) {
                let a = analyse(&t);
                prop_assert_eq!(a.culprits.is_empty(), a.encoding == Encoding::Gsm7);
            }

            #[test]
            fn culprits_point_at_their_chars(t in text()) {
                let chars: Vec<char> = t.chars().collect();
                let a = analyse(&t);
                let mut last = None;
                for c in &a.culprits {
                    prop_assert_eq!(chars[c.position], c.ch);
                    prop_assert!(!REF_BASIC.contains(c.ch) && !REF_EXT.contains(c.ch));
                    prop_assert!(last.is_none_or(|p| p < c.position));
                    last = Some(c.position);
                }
                let expected = chars
                    .iter()
                    .filter(|&&c| !REF_BASIC.contains(c) && !REF_EXT.contains(c))
                    .count();
                prop_assert_eq!(a.culprits.len(), expected);
            }

            #[test]
            fn units_fit_in_segments(t in text()) {
                let a = analyse(&t);
                let (single, multi) = match a.encoding {
                    Encoding::Gsm7 => (160, 153),
                    Encoding::Ucs2 => (70, 67),
                };
                match a.segments {
                    0 => prop_assert!(t.is_empty()),
                    1 => prop_assert!(a.units <= single),
                    n => {
                        prop_assert!(a.units > single);
                        prop_assert!(a.units <= n * multi);
                        // Greedy packing wastes at most 1 unit per boundary.
                        prop_assert!(a.units > (n - 1) * (multi - 1));
                    }
                }
            }

            #[test]
            fn ucs2_units_equal_utf16_len(t in text()) {
                let a = analyse(&t);
                if a.encoding == Encoding::Ucs2 {
                    prop_assert_eq!(a.units as usize, t.encode_utf16().count());
                }
            }
        }
    }
}
