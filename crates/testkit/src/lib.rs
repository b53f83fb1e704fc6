//! parley-testkit
