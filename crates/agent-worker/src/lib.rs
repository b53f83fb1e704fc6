//! parley-agent-worker
