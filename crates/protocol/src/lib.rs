//! parley-protocol
