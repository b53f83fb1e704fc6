//! [`WebhookSubscription`]: a debate's request to be told, over HTTP, when it reaches a
//! moment its submitter cares about (completed, failed, waiting for answers, degraded).
//!
//! A subscription names a URL and the kinds of [`WebhookEvent`] it wants. The URL is only a
//! *choice among* the operator's endpoints: the server that accepts the submission refuses
//! a URL the operator did not list, and the delivery checks the list again. The endpoint's
//! secret is the operator's and never enters the spec, the state or the events.

use serde::{Deserialize, Serialize};

use crate::{DebateEvent, EventKind};

/// Subscriptions one debate may carry.
pub const MAX_WEBHOOKS: usize = 4;
/// Bytes of one webhook URL, at most.
pub const MAX_WEBHOOK_URL_BYTES: usize = 2048;

/// The moments a webhook can be told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WebhookEvent {
    /// The debate ended with a solution (`debateCompleted`).
    Completed,
    /// The debate failed at a node (`debateFailed`); `parley retry` may resume it.
    Failed,
    /// The debate waits for answers to its clarification questions
    /// (`clarificationsRequested`).
    AwaitingAnswers,
    /// The budget made the debate give something up (`budgetDegraded`).
    Degraded,
}

impl WebhookEvent {
    pub const ALL: [WebhookEvent; 4] = [
        Self::Completed,
        Self::Failed,
        Self::AwaitingAnswers,
        Self::Degraded,
    ];

    /// The kind of the debate event that raises this webhook event, if any.
    pub fn of(event: &DebateEvent) -> Option<Self> {
        match event.kind {
            EventKind::DebateCompleted { .. } => Some(Self::Completed),
            EventKind::DebateFailed { .. } => Some(Self::Failed),
            EventKind::ClarificationsRequested { .. } => Some(Self::AwaitingAnswers),
            EventKind::BudgetDegraded { .. } => Some(Self::Degraded),
            _ => None,
        }
    }

    /// The payload's `type` (Standard Webhooks: a dotted name).
    pub fn type_name(self) -> &'static str {
        match self {
            Self::Completed => "debate.completed",
            Self::Failed => "debate.failed",
            Self::AwaitingAnswers => "debate.awaiting_answers",
            Self::Degraded => "debate.degraded",
        }
    }

    /// The name a subscription lists it by.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::AwaitingAnswers => "awaitingAnswers",
            Self::Degraded => "degraded",
        }
    }
}

/// One endpoint a debate asks to be told at, and what about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookSubscription {
    /// One of the operator's webhook endpoints (`http://` or `https://`), written as the
    /// operator listed it.
    pub url: String,
    /// What to be told about (at least one; each at most once).
    pub events: Vec<WebhookEvent>,
}

impl WebhookSubscription {
    /// The shape's problems (sizes, scheme, events), each with its field under `field`.
    /// Whether the URL is one the operator allows is the server's check, not this one.
    pub fn problems(&self, field: &str) -> Vec<crate::SpecError> {
        let mut out = Vec::new();
        let url = &self.url;
        if url.len() > MAX_WEBHOOK_URL_BYTES {
            out.push(crate::SpecError::new(
                format!("{field}.url"),
                format!("{} bytes, the limit is {MAX_WEBHOOK_URL_BYTES}", url.len()),
            ));
        } else if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
            out.push(crate::SpecError::new(
                format!("{field}.url"),
                "must not contain spaces or control characters",
            ));
        } else if !(url.starts_with("https://") || url.starts_with("http://")) {
            out.push(crate::SpecError::new(
                format!("{field}.url"),
                format!(
                    "{:?} is not an http:// or https:// URL",
                    crate::preview(url, 80)
                ),
            ));
        }
        if self.events.is_empty() {
            out.push(crate::SpecError::new(
                format!("{field}.events"),
                "name at least one of completed, failed, awaitingAnswers, degraded",
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for e in &self.events {
            if !seen.insert(*e) {
                out.push(crate::SpecError::new(
                    format!("{field}.events"),
                    format!("{} is listed twice", e.as_str()),
                ));
            }
        }
        out
    }
}

/// The problems of a debate's subscriptions (count, then each).
pub fn webhook_problems(hooks: &[WebhookSubscription]) -> Vec<crate::SpecError> {
    let mut out = Vec::new();
    if hooks.len() > MAX_WEBHOOKS {
        out.push(crate::SpecError::new(
            "webhooks",
            format!("{} webhooks, the limit is {MAX_WEBHOOKS}", hooks.len()),
        ));
        return out;
    }
    for (i, h) in hooks.iter().enumerate() {
        out.extend(h.problems(&format!("webhooks[{i}]")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_name_every_bad_field() {
        let bad = WebhookSubscription {
            url: "ftp://x".into(),
            events: vec![WebhookEvent::Failed, WebhookEvent::Failed],
        };
        let p = webhook_problems(&[bad]);
        let text: Vec<String> = p.iter().map(ToString::to_string).collect();
        assert!(text[0].starts_with("webhooks[0].url:"), "{text:?}");
        assert!(text[1].contains("failed is listed twice"), "{text:?}");
        let empty = WebhookSubscription {
            url: "https://a.example/\u{7}".into(),
            events: vec![],
        };
        assert_eq!(webhook_problems(&[empty]).len(), 2);
        let many = vec![
            WebhookSubscription {
                url: "https://a.example/".into(),
                events: vec![WebhookEvent::Completed],
            };
            MAX_WEBHOOKS + 1
        ];
        assert_eq!(webhook_problems(&many).len(), 1);
    }

    #[test]
    fn events_are_named_in_camel_case() {
        let v: Vec<WebhookEvent> =
            serde_json::from_str(r#"["completed","failed","awaitingAnswers","degraded"]"#).unwrap();
        assert_eq!(v, WebhookEvent::ALL.to_vec());
        assert!(serde_json::from_str::<WebhookEvent>(r#""done""#).is_err());
    }
}
