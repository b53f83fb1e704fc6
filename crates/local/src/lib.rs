//! parley-local
