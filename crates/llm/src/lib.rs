//! parley-llm
