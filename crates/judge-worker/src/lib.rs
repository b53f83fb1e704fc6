//! parley-judge-worker
