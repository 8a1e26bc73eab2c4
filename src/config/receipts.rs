//! `[receipts.ses]`, checked at load: topics that are ARNs, a certificate
//! file that holds an RSA certificate, a base URL that is one.

use super::{ConfigError, SesReceiptsConfig, invalid};

impl SesReceiptsConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.topic_arns.is_empty() {
            return Err(invalid(
                "receipts.ses.topic_arns: list the SNS topics SES publishes to, like \
                 [\"arn:aws:sns:eu-west-1:123456789012:ses-notifications\"]",
            ));
        }
        for (i, arn) in self.topic_arns.iter().enumerate() {
            let parts: Vec<&str> = arn.split(':').collect();
            if parts.len() != 6 || parts[0] != "arn" || parts[2] != "sns" || parts[5].is_empty() {
                return Err(invalid(format!(
                    "receipts.ses.topic_arns[{i}]: {arn:?} is not an SNS topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)"
                )));
            }
        }
        if let Some(path) = &self.certificate_file {
            let pem = std::fs::read(path)
                .map_err(|e| invalid(format!("receipts.ses.certificate_file: {}: {e}", path.display())))?;
            crate::receipt::sns::key_of_pem(&pem)
                .map_err(|e| invalid(format!("receipts.ses.certificate_file: {}: {e}", path.display())))?;
        }
        if let Some(base) = &self.sns_base_url {
            let ok = url::Url::parse(base).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
            if !ok {
                return Err(invalid(format!("receipts.ses.sns_base_url: {base:?} is not an http(s) URL")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ses(topics: &[&str]) -> SesReceiptsConfig {
        SesReceiptsConfig {
            topic_arns: topics.iter().map(|s| s.to_string()).collect(),
            certificate_file: None,
            confirm_subscriptions: false,
            sns_base_url: None,
        }
    }

    fn error(c: &SesReceiptsConfig) -> String {
        c.validate().unwrap_err().to_string()
    }

    #[test]
    fn each_key_is_checked_and_named() {
        assert!(ses(&["arn:aws:sns:eu-west-1:123456789012:ses"]).validate().is_ok());
        assert!(error(&ses(&[])).contains("receipts.ses.topic_arns"));
        assert!(error(&ses(&["arn:aws:sqs:eu-west-1:1:q"])).contains("receipts.ses.topic_arns[0]"));
        let missing =
            SesReceiptsConfig { certificate_file: Some("/nonexistent/cert.pem".into()), ..ses(&["arn:aws:sns:r:1:t"]) };
        assert!(error(&missing).contains("receipts.ses.certificate_file"));
        let base = SesReceiptsConfig { sns_base_url: Some("ftp://x".into()), ..ses(&["arn:aws:sns:r:1:t"]) };
        assert!(error(&base).contains("receipts.ses.sns_base_url"));
    }
}
