//! parley-cli
