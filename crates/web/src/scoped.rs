//! [`ScopedBackend`]: a backend as one caller sees it, for front ends other than the HTTP
//! API's own routes (the MCP server under `/mcp`).
//!
//! The same rules as the API's: what the caller creates is owned by its key's name; a
//! `user` key lists and reaches only its own debates, and any other debate is a 404 exactly
//! like one that does not exist (ids do not leak); an admin reaches every debate.

use std::sync::Arc;

use async_trait::async_trait;
use parley_protocol::subjects::ErrorCode;
use serde_json::Value;

use crate::backend::{
    checked_id, AnswersRequest, ApiError, Backend, DebateListItem, EventStream, FeedbackRequest,
    FormDefaults, SubmitRequest,
};
use crate::keys::Principal;

/// `inner` as `principal` sees it; see the module docs.
pub struct ScopedBackend {
    inner: Arc<dyn Backend>,
    principal: Principal,
}

impl ScopedBackend {
    pub fn new(inner: Arc<dyn Backend>, principal: Principal) -> Self {
        Self { inner, principal }
    }

    /// `id` when the caller may reach it; a 404 otherwise.
    async fn visible<'a>(&self, id: &'a str) -> Result<&'a str, ApiError> {
        let id = checked_id(id)?;
        if self.principal.is_admin() {
            return Ok(id);
        }
        match self.inner.owner(id).await {
            Ok(owner) if self.principal.may_see(owner.as_deref()) => Ok(id),
            Ok(_) => Err(ApiError::not_found(id)),
            Err(e) if e.code == ErrorCode::NotFound => Err(ApiError::not_found(id)),
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl Backend for ScopedBackend {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn defaults(&self) -> FormDefaults {
        self.inner.defaults()
    }

    async fn submit(&self, request: SubmitRequest) -> Result<String, ApiError> {
        self.inner
            .submit_owned(request, self.principal.name.as_deref())
            .await
    }

    /// The owner is always the caller's: an `owner` argument is ignored.
    async fn submit_owned(
        &self,
        request: SubmitRequest,
        _owner: Option<&str>,
    ) -> Result<String, ApiError> {
        self.submit(request).await
    }

    async fn list(&self) -> Result<Vec<DebateListItem>, ApiError> {
        let mut items = self.inner.list().await?;
        items.retain(|i| self.principal.may_see(i.owner.as_deref()));
        Ok(items)
    }

    async fn state(&self, id: &str) -> Result<Value, ApiError> {
        let id = self.visible(id).await?;
        self.inner.state(id).await
    }

    async fn report(&self, id: &str) -> Result<String, ApiError> {
        let id = self.visible(id).await?;
        self.inner.report(id).await
    }

    async fn events(&self, id: &str, after: u64) -> Result<EventStream, ApiError> {
        let id = self.visible(id).await?;
        self.inner.events(id, after).await
    }

    async fn retry(&self, id: &str) -> Result<Value, ApiError> {
        let id = self.visible(id).await?;
        self.inner.retry(id).await
    }

    async fn cancel(&self, id: &str) -> Result<Value, ApiError> {
        let id = self.visible(id).await?;
        self.inner.cancel(id).await
    }

    async fn answer(&self, id: &str, answers: AnswersRequest) -> Result<Value, ApiError> {
        let id = self.visible(id).await?;
        self.inner.answer(id, answers).await
    }

    async fn feedback(&self, id: &str, feedback: FeedbackRequest) -> Result<Value, ApiError> {
        let id = self.visible(id).await?;
        self.inner.feedback(id, feedback).await
    }

    async fn record(&self, id: &str) -> Result<Value, ApiError> {
        let id = self.visible(id).await?;
        self.inner.record(id).await
    }

    /// Recorded as the caller's key when the caller has one (whatever `by` says).
    async fn steer(
        &self,
        id: &str,
        command: parley_protocol::SteerCommand,
        by: Option<String>,
    ) -> Result<Value, ApiError> {
        let id = self.visible(id).await?;
        let by = self.principal.name.clone().or(by);
        self.inner.steer(id, command, by).await
    }

    /// Recorded as the caller's key when the caller has one (whatever `by` says).
    async fn contribute(
        &self,
        id: &str,
        mut c: parley_engine::Contribute,
    ) -> Result<Value, ApiError> {
        let id = self.visible(id).await?;
        c.by = self.principal.name.clone().or(c.by);
        self.inner.contribute(id, c).await
    }

    async fn owner(&self, id: &str) -> Result<Option<String>, ApiError> {
        let id = self.visible(id).await?;
        self.inner.owner(id).await
    }
}
