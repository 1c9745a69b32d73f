//! Where the `http` executor may connect. By default anywhere but this machine and its link:
//! loopback, link-local (cloud metadata services live there), unspecified, multicast and
//! broadcast addresses are refused, so that a task cannot reach the scheduler's own API or a
//! metadata service. `--http-allow` replaces that rule with an explicit list of networks.
//!
//! The rule is applied to every address a name resolves to (at connect time, so a name that
//! resolves differently later cannot slip past it) and to addresses written in the URL.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The addresses the `http` executor may connect to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpPolicy {
    /// `None`: every address but the refused kinds; `Some`: only these networks.
    allow: Option<Vec<IpNet>>,
}

impl HttpPolicy {
    /// Only the networks in `list` (comma-separated CIDR blocks or single addresses, like
    /// `10.0.0.0/8,192.168.1.20,::1`), loopback and link-local included only if listed.
    pub fn allow_only(list: &str) -> Result<HttpPolicy, String> {
        let mut nets = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let net = item
                .parse::<IpNet>()
                .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    format!("invalid network {item:?}: expected an address or a CIDR block like 10.0.0.0/8")
                })?;
            nets.push(net.trunc());
        }
        if nets.is_empty() {
            return Err("the list of networks is empty".into());
        }
        Ok(HttpPolicy { allow: Some(nets) })
    }

    /// Whether a connection to `ip` is allowed.
    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        match &self.allow {
            Some(nets) => nets.iter().any(|n| n.contains(&ip)),
            None => !refused_by_default(ip),
        }
    }

    /// Checks `ip`, with an error that says what to do.
    pub(crate) fn check(&self, ip: IpAddr) -> Result<(), String> {
        if self.allows(ip) {
            return Ok(());
        }
        Err(match &self.allow {
            Some(_) => format!("address {ip} is not in --http-allow"),
            None => format!(
                "address {ip} is refused (loopback, link-local, multicast and unspecified \
                 addresses need --http-allow)"
            ),
        })
    }
}

/// An IPv4 address written as IPv6 (`::ffff:127.0.0.1`) is that IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn refused_by_default(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                // 0.0.0.0/8 reaches this machine on Linux.
                || v4.octets()[0] == 0
        }
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // fe80::/10, link-local unicast.
                || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// A connection the policy does not allow (a fatal failure: another attempt gets the same).
#[derive(Debug)]
pub(crate) struct Refused(pub(crate) String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The refusal somewhere in `e`'s chain of causes.
pub(crate) fn refusal<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refused> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(r) = e.downcast_ref::<Refused>() {
            return Some(r);
        }
        next = e.source();
    }
    None
}

/// Resolves names with the system resolver and keeps only the allowed addresses.
#[derive(Debug)]
pub(crate) struct GuardedResolver(pub(crate) Arc<HttpPolicy>);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refused = None;
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match policy.check(a.ip()) {
                    Ok(()) => true,
                    Err(e) => {
                        refused = Some(e);
                        false
                    }
                })
                .collect();
            if allowed.is_empty() {
                return Err(match refused {
                    Some(why) => Box::new(Refused(format!("{host}: {why}"))) as _,
                    None => format!("{host}: no address").into(),
                });
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_default_refuses_this_machine_and_its_link() {
        let p = HttpPolicy::default();
        for refused in [
            "127.0.0.1",
            "127.9.9.9",
            "::1",
            "::ffff:127.0.0.1",
            "169.254.169.254",
            "fe80::1",
            "0.0.0.0",
            "0.1.2.3",
            "::",
            "224.0.0.1",
            "255.255.255.255",
        ] {
            assert!(!p.allows(ip(refused)), "{refused}");
        }
        for allowed in ["10.1.2.3", "192.168.0.10", "8.8.8.8", "2001:db8::1"] {
            assert!(p.allows(ip(allowed)), "{allowed}");
        }
    }

    #[test]
    fn an_allow_list_allows_exactly_its_networks() {
        let p = HttpPolicy::allow_only("10.0.0.0/8, 127.0.0.2,::1").unwrap();
        assert!(p.allows(ip("10.200.0.1")));
        assert!(p.allows(ip("127.0.0.2")));
        assert!(p.allows(ip("::1")));
        assert!(!p.allows(ip("127.0.0.1")));
        assert!(!p.allows(ip("8.8.8.8")));
        assert!(HttpPolicy::allow_only("10.0.0.0/33").is_err());
        assert!(HttpPolicy::allow_only("example.com").is_err());
        assert!(HttpPolicy::allow_only(" , ").is_err());
    }
}
