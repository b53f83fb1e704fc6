//! parley-coordinator
