//! `parley adr`, `parley record` and `parley verify`, and what `parley run` writes when a
//! debate finishes: its decision record (`./debates/<id>.record.json`, signed when a
//! signing key is configured) and, with `--adr DIR`, an ADR.
//!
//! A saved debate is named like `parley report` and `parley status` name it: a path to a
//! state JSON (a checkpoint `./debates/<id>.json`, `run --output x.json`, `parley status`'s
//! output, dialectic's state), or a debate id saved in `./debates/`.
//!
//! Signing keys (see `parley_record::keys`): `--record-signing-key F` or
//! `PARLEY_RECORD_SIGNING_KEY=F`, a file holding the base64 of a 32-byte Ed25519 seed;
//! `parley record --generate-key DIR` makes one. The public key is published next to the
//! records as `record-key-<key id>.pub`.

use std::path::{Path, PathBuf};

use parley_protocol::{DebateSpec, DebateState};
use parley_record::{PublicKey, Record, SignatureCheck, SigningKey};

use crate::adr::{self, AdrInput, AdrStatus, RecordLink};
use crate::CliError;

/// The environment variable naming the signing key file.
pub const SIGNING_KEY_ENV: &str = "PARLEY_RECORD_SIGNING_KEY";

/// The exit code of `parley verify` when the record does not verify.
pub const EXIT_NOT_VERIFIED: u8 = 5;

/// The largest saved debate read.
const STATE_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// The signing key option shared by `run`, `resume`, `retry` and `record`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SigningArgs {
    /// Sign the debate's decision record with this Ed25519 key file (base64 of a 32-byte
    /// seed; `parley record --generate-key DIR` makes one).
    #[arg(long, value_name = "FILE", env = SIGNING_KEY_ENV, hide_env_values = true)]
    pub record_signing_key: Option<PathBuf>,
}

impl SigningArgs {
    /// The key, read now (a bad key file stops the command before any work).
    pub fn load(&self) -> Result<Option<SigningKey>, CliError> {
        self.record_signing_key
            .as_deref()
            .map(SigningKey::from_file)
            .transpose()
            .map_err(|e| CliError::config(e.to_string()))
    }
}

/// A saved debate as read from disk.
pub struct Saved {
    pub state: DebateState,
    /// The spec, when the file carries it (an embedded checkpoint does).
    pub spec: Option<DebateSpec>,
    /// The state file.
    pub path: PathBuf,
}

impl Saved {
    /// Where its record goes: `<stem>.record.json` next to the state file.
    pub fn record_path(&self) -> PathBuf {
        record_path_of(&self.path)
    }
}

pub use parley_record::files::record_path_of;

/// Reads the saved debate `arg` names: a debate id in `./debates/`, else a path.
pub fn load_saved(arg: &str) -> Result<Saved, CliError> {
    let by_id = Path::new(parley_cli::DEBATES_DIR).join(format!("{arg}.json"));
    let path = if parley_protocol::is_valid_debate_id(arg) && by_id.is_file() {
        by_id
    } else {
        let p = PathBuf::from(arg);
        if !p.is_file() {
            return Err(CliError::usage(
                if parley_protocol::is_valid_debate_id(arg) {
                    format!("no saved debate {arg} in {}", parley_cli::DEBATES_DIR)
                } else {
                    format!(
                        "{:?} is neither a saved debate's file nor a debate id",
                        parley_protocol::preview(arg, 80)
                    )
                },
            ));
        }
        p
    };
    let shown = path.display().to_string();
    let bytes = read_capped(&path, STATE_MAX_BYTES)
        .map_err(|e| CliError::usage(format!("cannot read the saved debate {shown}: {e}")))?;
    let state = parley_protocol::parse_saved_state(&bytes).map_err(|e| {
        CliError::usage(format!(
            "{shown} is not a saved debate (DebateState JSON): {e}"
        ))
    })?;
    let spec = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|mut v| v.get_mut("spec").map(serde_json::Value::take))
        .and_then(|s| serde_json::from_value::<DebateSpec>(s).ok());
    Ok(Saved { state, spec, path })
}

fn read_capped(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(cap + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(std::io::Error::other(format!("larger than {cap} bytes")));
    }
    Ok(bytes)
}

/// Builds the record of a finished debate, signs it with `key` and writes it to `path`
/// (replacing an older record of the same debate); publishes the public key next to it.
pub fn write_record(
    state: &DebateState,
    spec: Option<&DebateSpec>,
    key: Option<&SigningKey>,
    path: &Path,
) -> Result<Record, CliError> {
    parley_record::files::write(state, spec, key, path).map_err(|e| match e {
        parley_record::files::WriteError::Build(e) => CliError::usage(e.to_string()),
        e => CliError::general(e.to_string()),
    })
}

/// `signed with key <id>` or `unsigned`.
pub fn signature_words(r: &Record) -> String {
    match &r.signature {
        Some(s) => format!("signed with key {}", s.key_id),
        None => "unsigned".into(),
    }
}

/// The record saved next to `state_file`, when there is one that reads.
pub fn saved_record(state_file: &Path) -> Option<Record> {
    parley_record::read(&record_path_of(state_file)).ok()
}

/// Writes the ADR of `state` into `dir` and returns its path.
pub fn write_adr(
    state: &DebateState,
    spec: Option<&DebateSpec>,
    record: Option<(&Record, &Path)>,
    dir: &Path,
    status: AdrStatus,
) -> Result<PathBuf, CliError> {
    let link = record.map(|(r, p)| RecordLink {
        href: adr::relative(dir, p),
        digest: r.digest(),
        signature: signature_words(r),
    });
    let input = AdrInput {
        state,
        spec,
        status,
        date: chrono::Utc::now().date_naive(),
        record: link,
    };
    let md = adr::render(&input).map_err(|e| CliError::usage(e.0))?;
    adr::write_next(dir, &adr::title(state), &md).map_err(|e| CliError::general(e.to_string()))
}

/// `parley adr`.
#[derive(clap::Args, Debug)]
pub struct AdrArgs {
    /// The saved debate: a debate id in ./debates/ or a state JSON file.
    #[arg(value_name = "ID|STATE_JSON")]
    pub debate: String,
    /// The ADR folder; the file continues its numbering (NNNN-title.md).
    #[arg(long, value_name = "DIR", default_value = "docs/adr")]
    pub dir: PathBuf,
    /// The ADR's status.
    #[arg(long, value_enum, default_value = "proposed")]
    pub status: AdrStatus,
}

pub fn adr_command(args: AdrArgs) -> Result<(), CliError> {
    let saved = load_saved(&args.debate)?;
    let record_path = saved.record_path();
    let record = saved_record(&saved.path);
    let path = write_adr(
        &saved.state,
        saved.spec.as_ref(),
        record.as_ref().map(|r| (r, record_path.as_path())),
        &args.dir,
        args.status,
    )?;
    println!("{}", path.display());
    Ok(())
}

/// `parley record`.
#[derive(clap::Args, Debug)]
pub struct RecordArgs {
    /// The saved debate: a debate id in ./debates/ or a state JSON file.
    #[arg(
        value_name = "ID|STATE_JSON",
        required_unless_present = "generate_key",
        conflicts_with = "generate_key"
    )]
    pub debate: Option<String>,
    /// Write the record here (default: `<state>.record.json` next to the state file).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub signing: SigningArgs,
    /// Make a new signing key pair in DIR instead: `record-signing.key` (private, mode
    /// 0600) and `record-signing.pub`; existing files are never overwritten.
    #[arg(long, value_name = "DIR")]
    pub generate_key: Option<PathBuf>,
}

pub fn record_command(args: RecordArgs) -> Result<(), CliError> {
    if let Some(dir) = &args.generate_key {
        return generate_key(dir);
    }
    let Some(debate) = &args.debate else {
        return Err(CliError::usage(
            "name the saved debate: parley record <id|state.json>",
        ));
    };
    let key = args.signing.load()?;
    let saved = load_saved(debate)?;
    let path = args.output.clone().unwrap_or_else(|| saved.record_path());
    let record = write_record(&saved.state, saved.spec.as_ref(), key.as_ref(), &path)?;
    eprintln!(
        "Wrote the decision record of debate {} to {} ({})",
        saved.state.id,
        path.display(),
        signature_words(&record)
    );
    println!("{}", record.digest());
    Ok(())
}

fn generate_key(dir: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::general(format!("cannot create {}: {e}", dir.display())))?;
    let private = dir.join("record-signing.key");
    let public = dir.join("record-signing.pub");
    if private.exists() || public.exists() {
        return Err(CliError::usage(format!(
            "{} already holds a signing key pair: not overwritten",
            dir.display()
        )));
    }
    let key = SigningKey::generate();
    key.write_new(&private)
        .map_err(|e| CliError::general(e.to_string()))?;
    key.public()
        .write_new(&public)
        .map_err(|e| CliError::general(e.to_string()))?;
    println!("key id {}", key.public().key_id());
    println!(
        "private key {} (keep it secret; set {SIGNING_KEY_ENV} to it)",
        private.display()
    );
    println!(
        "public key {} (give it to whoever verifies)",
        public.display()
    );
    Ok(())
}

/// `parley verify`.
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The decision record (`<id>.record.json`).
    #[arg(value_name = "RECORD")]
    pub record: PathBuf,
    /// The debate's state JSON: every text is checked against its digest (and the spec,
    /// when the file carries it).
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// The debate's Markdown report (`parley report`, `run --report`, the page's or the
    /// API's report): every contribution and summary it shows is checked against its digest,
    /// with its tokens and model, and the solution, the totals and the record's digest.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// The public key file to check the signature with.
    #[arg(long, value_name = "FILE")]
    pub public_key: Option<PathBuf>,
}

/// `parley verify`: exit 0 when the record verifies, [`EXIT_NOT_VERIFIED`] with the first
/// mismatch named when it does not, 2 when a file cannot be read.
pub fn verify_command(args: VerifyArgs) -> Result<(), CliError> {
    let record = parley_record::read(&args.record).map_err(|e| CliError::usage(e.to_string()))?;
    let key = args
        .public_key
        .as_deref()
        .map(PublicKey::from_file)
        .transpose()
        .map_err(|e| CliError::usage(e.to_string()))?;
    let saved = args
        .state
        .as_ref()
        .map(|p| load_saved(&p.display().to_string()))
        .transpose()?;
    let evidence = saved.as_ref().map(|s| parley_record::Evidence {
        state: &s.state,
        spec: s.spec.as_ref(),
    });
    let report = args
        .report
        .as_ref()
        .map(|p| {
            read_capped(p, parley_record::report::REPORT_MAX_BYTES)
                .map_err(|e| {
                    CliError::usage(format!("cannot read the report {}: {e}", p.display()))
                })
                .and_then(|b| {
                    String::from_utf8(b).map_err(|_| {
                        CliError::usage(format!("the report {} is not UTF-8 text", p.display()))
                    })
                })
        })
        .transpose()?;
    let not_verified = |m: parley_record::Mismatch| CliError {
        code: EXIT_NOT_VERIFIED,
        message: format!("{} does not verify: {m}", args.record.display()),
    };
    let ok = parley_record::verify(&record, key.as_ref(), evidence).map_err(not_verified)?;
    let report_check = report
        .as_deref()
        .map(|md| parley_record::check_report(&record, md))
        .transpose()
        .map_err(not_verified)?;
    println!(
        "record {}: debate {}, {} contributions, digest {}",
        args.record.display(),
        record.debate_id,
        ok.entries,
        ok.digest
    );
    println!("chain: intact (head {})", record.head);
    println!(
        "signature: {}",
        match &ok.signature {
            SignatureCheck::Verified { key_id } => format!("verified with key {key_id}"),
            SignatureCheck::Unsigned => "unsigned".into(),
            SignatureCheck::NotChecked { key_id } =>
                format!("signed with key {key_id}, not checked (give --public-key to check it)"),
        }
    );
    match (&ok.state, &saved) {
        (Some(s), Some(saved)) => println!(
            "state: {} matches: every text, model, token count and the solution{}",
            saved.path.display(),
            if s.spec_checked { ", and the spec" } else { "" }
        ),
        _ => println!("state: not checked (give --state to check every text against its digest)"),
    }
    if let (Some(c), Some(p)) = (&report_check, &args.report) {
        println!(
            "report: {} matches: {} texts with their tokens and models{}, the totals{}",
            p.display(),
            c.texts,
            if c.solution { ", the solution" } else { "" },
            if c.not_covered > 0 {
                format!(
                    "; {} judgements (evaluations, verdicts, votes, the judge's summary) are not \
                     texts of a report: --state checks them",
                    c.not_covered
                )
            } else {
                String::new()
            }
        );
    }
    Ok(())
}
