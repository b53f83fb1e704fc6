//! Network namespaces for partitions: every Parley process of a soak runs in a namespace
//! of its own, joined to the host by a veth pair, and reaches the servers (NATS, Redis,
//! the fake LLM) at one host address, [`Network::host`]. A partition adds policy rules in
//! the process's namespace that send its packets for chosen server ports to a blackhole
//! route: new connections fail, established ones stop hearing back, as behind a cut
//! link; healing deletes the rules.
//!
//! Needs root (`ip netns`, `ip link add ... type veth`). Names carry the test process's
//! pid (`pzsoak-<pid>-<n>`, interfaces `pz<pid hex>h<n>`), so runs never collide; the
//! namespaces (and with them their veth pairs and rules) are deleted when the [`Network`]
//! drops, panics included, and a new [`Network`] first deletes the namespaces of runs
//! whose process is gone (a run killed with SIGKILL cannot clean up after itself).
//!
//! The host address is the host end of an anchor pair whose namespace runs nothing: the
//! host accepts packets for any of its addresses on any interface, so every namespace
//! reaches it through its own pair.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::Mutex;

use anyhow::{bail, Context as _};

/// Namespace names start with this, then `<pid>-<n>`.
const PREFIX: &str = "pzsoak-";
/// The routing table partitions send packets to (a blackhole route for the host address).
const TABLE: &str = "77";
/// The priority of partition rules (before the main table's 32766).
const RULE_PRIORITY: &str = "77";

/// Runs `ip` with `args`; an error names the command and what it printed.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("while running ip (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The namespaces of this run and the host address; deletes them on drop.
#[derive(Debug)]
pub struct Network {
    /// `pz<pid hex>`: the interfaces' prefix.
    tag: String,
    /// `10.X.Y.0/24`: the /30 of namespace `n` is `10.X.Y.4n/30`.
    net: [u8; 3],
    /// The namespaces created so far (the anchor first).
    created: Mutex<Vec<String>>,
    /// The host end of the anchor pair, where the servers listen.
    host: Ipv4Addr,
}

impl Network {
    /// Deletes stale namespaces of dead runs, then creates the anchor namespace and its
    /// pair. Fails (with what `ip` said) when namespaces cannot be made, e.g. not as root.
    pub fn create() -> anyhow::Result<Network> {
        sweep_stale();
        let pid = std::process::id();
        let net = [10, 200 + ((pid >> 8) % 50) as u8, (pid % 256) as u8];
        let network = Network {
            tag: format!("pz{pid:x}"),
            net,
            created: Mutex::new(Vec::new()),
            host: Ipv4Addr::new(net[0], net[1], net[2], 1),
        };
        network.namespace()?;
        Ok(network)
    }

    /// The address the servers listen on and every namespace reaches.
    pub fn host(&self) -> IpAddr {
        IpAddr::V4(self.host)
    }

    /// Creates the next namespace, joined to the host by a veth pair with a default route
    /// to the host end; returns its name.
    pub fn namespace(&self) -> anyhow::Result<String> {
        let mut created = self.created.lock().unwrap_or_else(|e| e.into_inner());
        let n = created.len();
        anyhow::ensure!(n < 63, "at most 63 namespaces per run");
        let name = format!("{PREFIX}{}-{n}", std::process::id());
        let (host_if, ns_if) = (format!("{}h{n}", self.tag), format!("{}n{n}", self.tag));
        let [a, b, c] = self.net;
        let base = (4 * n) as u8;
        let host_addr = format!("{a}.{b}.{c}.{}/30", base + 1);
        let ns_addr = format!("{a}.{b}.{c}.{}/30", base + 2);
        let gateway = format!("{a}.{b}.{c}.{}", base + 1);
        ip(&["netns", "add", &name])?;
        created.push(name.clone());
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ])?;
        ip(&["link", "set", &ns_if, "netns", &name])?;
        ip(&["addr", "add", &host_addr, "dev", &host_if])?;
        ip(&["link", "set", &host_if, "up"])?;
        ip(&["-n", &name, "addr", "add", &ns_addr, "dev", &ns_if])?;
        ip(&["-n", &name, "link", "set", &ns_if, "up"])?;
        ip(&["-n", &name, "link", "set", "lo", "up"])?;
        ip(&["-n", &name, "route", "add", "default", "via", &gateway])?;
        let blackhole = format!("{}/32", self.host);
        ip(&[
            "-n",
            &name,
            "route",
            "add",
            "blackhole",
            &blackhole,
            "table",
            TABLE,
        ])?;
        Ok(name)
    }

    /// Cuts namespace `ns` off from `ports` of the host address (both directions of those
    /// connections stall: its packets to them are dropped).
    pub fn partition(&self, ns: &str, ports: &[u16]) -> anyhow::Result<()> {
        for port in ports {
            let port = port.to_string();
            ip(&[
                "-n",
                ns,
                "rule",
                "add",
                "ipproto",
                "tcp",
                "dport",
                &port,
                "table",
                TABLE,
                "priority",
                RULE_PRIORITY,
            ])?;
        }
        Ok(())
    }

    /// Removes every partition rule of namespace `ns`.
    pub fn heal(&self, ns: &str) -> anyhow::Result<()> {
        // `ip rule del priority P` removes one rule of that priority per call.
        for _ in 0..64 {
            if ip(&["-n", ns, "rule", "del", "priority", RULE_PRIORITY]).is_err() {
                return Ok(());
            }
        }
        bail!("more than 64 partition rules in {ns}")
    }

    /// The command that runs `program` inside namespace `ns`.
    pub fn command_in(ns: &str, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns]).arg(program);
        cmd
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let created = self.created.lock().unwrap_or_else(|e| e.into_inner());
        for name in created.iter() {
            // Deleting a namespace deletes its end of the pair, and with it the host end.
            if let Err(e) = ip(&["netns", "del", name]) {
                eprintln!("soak network: {e}");
            }
        }
    }
}

/// Deletes `pzsoak-<pid>-<n>` namespaces whose process no longer runs.
fn sweep_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or_default();
        if !pid.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", name]);
        }
    }
}
