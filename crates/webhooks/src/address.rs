//! Which addresses a webhook may connect to.
//!
//! Unless the operator lists an endpoint with `private_network = true`, a delivery
//! connects only to *global* addresses: not loopback, private (RFC 1918, unique local),
//! link-local, shared (CGNAT), documentation, benchmarking, multicast, broadcast,
//! unspecified or reserved ones, nor an IPv6 address that embeds such an IPv4 one. The
//! check is made on the addresses the name *resolves to when connecting* ([`Guarded`] is
//! the HTTP client's resolver), so a name that resolved to a public address at submission
//! and to `127.0.0.1` now (DNS rebinding) is refused; a URL whose host is an address is
//! checked the same way before the request ([`check_literal`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Whether `ip` is a global (publicly routable) address.
pub fn is_global(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_global_v4(v4),
        IpAddr::V6(v6) => is_global_v6(v6),
    }
}

fn is_global_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0 // "this network"
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2) // TEST-NET-1
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast
        || (a == 192 && b == 168)
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || (a == 198 && b == 51 && c == 100) // TEST-NET-2
        || (a == 203 && b == 0 && c == 113) // TEST-NET-3
        || a >= 224) // multicast, reserved, broadcast
}

fn is_global_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_global_v4(v4);
    }
    let s = ip.segments();
    // NAT64 (64:ff9b::/96) embeds an IPv4 address in its last 32 bits.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return is_global_v4(Ipv4Addr::new(
            (s[6] >> 8) as u8,
            s[6] as u8,
            (s[7] >> 8) as u8,
            s[7] as u8,
        ));
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || s[0] & 0xfe00 == 0xfc00 // unique local
        || s[0] & 0xffc0 == 0xfe80 // link-local
        || s[0] & 0xffc0 == 0xfec0 // site-local (deprecated)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x2001 && s[1] < 0x0200) // IETF protocol assignments (Teredo, ...)
        || s[0] == 0x2002 // 6to4: embeds an IPv4 address
        || s[0] == 0x0100 && s[1..4] == [0, 0, 0] // discard-only
        || s[0..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible (deprecated)
}

/// A URL's host, when it is an IP address, checked like a resolved one.
pub fn check_literal(url: &reqwest::Url, private_network: bool) -> Result<(), Refused> {
    // The parser writes an address host in its canonical form (IPv6 in brackets).
    let host = url.host_str().unwrap_or_default();
    let Ok(ip) = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    else {
        return Ok(());
    };
    if private_network || is_global(ip) {
        Ok(())
    } else {
        Err(Refused::NonGlobal {
            host: ip.to_string(),
            ip,
        })
    }
}

/// The HTTP client's resolver: the system's, keeping only the addresses allowed.
#[derive(Debug, Clone, Copy)]
pub struct Guarded {
    /// Non-global addresses are allowed (an endpoint listed with `private_network`).
    pub private_network: bool,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a delivery may not connect to a host: the error of [`check_literal`], and the
/// resolver's error for a name that resolves only to refused addresses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// `host` is (or resolves to) `ip`, which is not global, and the endpoint is not
    /// listed with `private_network`.
    #[error(
        "{host} is {ip}, a loopback, private, link-local or otherwise non-global address: \
         list the endpoint with private_network = true to allow it"
    )]
    NonGlobal { host: String, ip: IpAddr },
    #[error("{host} resolves to no address")]
    NoAddress { host: String },
}

impl Resolve for Guarded {
    fn resolve(&self, name: Name) -> Resolving {
        let private = self.private_network;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|e| Box::new(e) as BoxError)?
                .collect();
            let allowed: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| private || is_global(a.ip()))
                .collect();
            if allowed.is_empty() {
                let refused = match all.first() {
                    Some(a) => Refused::NonGlobal { host, ip: a.ip() },
                    None => Refused::NoAddress { host },
                };
                return Err(Box::new(refused) as BoxError);
            }
            Ok::<Addrs, BoxError>(Box::new(allowed.into_iter()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_global_addresses_are_refused() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "2001:db8::1",
            "2002:7f00:1::",
        ] {
            let ip: IpAddr = bad.parse().unwrap();
            assert!(!is_global(ip), "{bad} passed");
        }
        for good in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "2606:4700::1111",
            "64:ff9b::808:808",
        ] {
            let ip: IpAddr = good.parse().unwrap();
            assert!(is_global(ip), "{good} refused");
        }
    }

    #[test]
    fn literal_hosts_are_checked_unless_private_networks_are_allowed() {
        let url = reqwest::Url::parse("http://127.0.0.1:9/x").unwrap();
        let err = check_literal(&url, false).unwrap_err();
        assert_eq!(
            err,
            Refused::NonGlobal {
                host: "127.0.0.1".into(),
                ip: IpAddr::from([127, 0, 0, 1])
            }
        );
        assert!(err.to_string().contains("private_network"), "{err}");
        assert!(check_literal(&url, true).is_ok());
        let v6 = reqwest::Url::parse("http://[::1]:9/").unwrap();
        assert!(check_literal(&v6, false).is_err());
        let name = reqwest::Url::parse("http://localhost:9/").unwrap();
        assert!(
            check_literal(&name, false).is_ok(),
            "names are checked when resolved"
        );
    }

    #[tokio::test]
    async fn a_name_that_resolves_to_loopback_is_refused_when_connecting() {
        let strict = Guarded {
            private_network: false,
        };
        let name: Name = "localhost".parse().unwrap();
        let err = match strict.resolve(name).await {
            Ok(_) => panic!("localhost resolved"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("non-global"), "{err}");
        let open = Guarded {
            private_network: true,
        };
        assert!(open.resolve("localhost".parse().unwrap()).await.is_ok());
    }
}
