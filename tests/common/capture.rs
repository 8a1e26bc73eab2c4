//! Herald's log lines captured as `herald serve --log-format json` writes
//! them, with routine lines sampled as `[log] sample_accepted` says.
//!
//! The subscriber is this thread's: a test on the current-thread runtime
//! gets every line its server's and worker's tasks write.

use herald::ops::log::SampleRoutine;
use serde_json::Value;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use tracing_subscriber::layer::SubscriberExt;

#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

impl Capture {
    /// Captures this thread's lines at INFO and above until the guard drops,
    /// routine ones kept with probability `sample_accepted`. As in `main`,
    /// the line layer sees events only, so a line carries no span context and
    /// has the size it has in production.
    pub fn install(&self, sample_accepted: f64) -> tracing::subscriber::DefaultGuard {
        use tracing_subscriber::Layer;
        // tracing keeps one interest per line of code for the whole process.
        // While a single dispatcher is registered, the thread that reaches a
        // line first decides it against its own subscriber: a test on another
        // thread with none pins the line to "never", and this capture never
        // sees it. A second dispatcher, kept for the life of the process,
        // makes tracing ask every registered one, this capture included.
        static ANCHOR: OnceLock<tracing::Dispatch> = OnceLock::new();
        ANCHOR.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
        let events = tracing_subscriber::filter::filter_fn(|m| m.is_event());
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::filter::LevelFilter::INFO)
            .with(SampleRoutine::new(sample_accepted))
            .with(tracing_subscriber::fmt::layer().json().with_writer(self.clone()).with_filter(events));
        tracing::subscriber::set_default(subscriber)
    }

    /// Everything written so far, as written.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }

    /// Every line's fields, with its level.
    pub fn lines(&self) -> Vec<Value> {
        self.text()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| {
                let mut f = v["fields"].clone();
                f["level"] = v["level"].clone();
                f
            })
            .collect()
    }

    /// The lines about one intent.
    pub fn about(&self, intent: &str) -> Vec<Value> {
        self.lines().into_iter().filter(|l| l["intent"] == intent).collect()
    }
}
