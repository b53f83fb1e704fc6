//! Logging shared by the service binaries: JSON lines on stderr, filtered by `PARLEY_LOG`
//! (default `info`).

pub fn init_service_logging() {
    tracing_subscriber::fmt()
        .json()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PARLEY_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
}
