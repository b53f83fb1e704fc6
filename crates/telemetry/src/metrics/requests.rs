//! The metrics of requests to the services: error replies, refused reply subjects,
//! refused follows.

use super::{CapLabels, Metrics, RequestErrorLabels, SubjectLabels};

impl Metrics {
    /// A request was not answered: its reply subject is not an inbox (`subject`: the
    /// request subject's label, from a fixed set).
    pub fn reply_refused(&self, subject: &'static str) {
        self.inner
            .replies_refused
            .get_or_create(&SubjectLabels {
                subject: subject.to_string(),
            })
            .inc();
    }

    /// A follow request was refused by the cap `cap` (`total`, `client` or `debate`).
    pub fn follower_refused(&self, cap: &'static str) {
        self.inner
            .followers_refused
            .get_or_create(&CapLabels {
                cap: cap.to_string(),
            })
            .inc();
    }

    /// A request on `subject` (a fixed name: `submit`, `status`, ...) got an error reply
    /// with `code` (an error code, from a fixed set).
    pub fn request_error(&self, subject: &'static str, code: &'static str) {
        self.inner
            .request_errors
            .get_or_create(&RequestErrorLabels {
                subject: subject.to_string(),
                code: code.to_string(),
            })
            .inc();
    }
}
