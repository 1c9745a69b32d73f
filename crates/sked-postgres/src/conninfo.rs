//! From a connection string to a connection's settings, as libpq reads them where
//! tokio-postgres does not: `sslmode` (all five modes) and `sslrootcert` (also from
//! `PGSSLMODE` and `PGSSLROOTCERT`), and a password that is not in the string, from
//! `PGPASSWORD` or the password file (`PGPASSFILE`, else `~/.pgpass`).
//!
//! Both forms of connection string are read: `postgres://…?sslmode=…` URLs and
//! `host=… sslmode=…` key/value strings.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use percent_encoding::percent_decode_str;
use tokio_postgres::config::Host;

use crate::tls::{RootCert, SslMode, TlsSettings};

/// The parameters sked reads itself; the rest go to tokio-postgres untouched.
const OURS: [&str; 2] = ["sslmode", "sslrootcert"];

/// Client certificates are not supported: naming one is an error rather than a silent
/// connection without it.
const UNSUPPORTED: [&str; 4] = ["sslcert", "sslkey", "sslpassword", "sslcrl"];

/// The connection settings of a connection string, with the environment's defaults applied.
pub(crate) fn parse(conn: &str) -> Result<(tokio_postgres::Config, TlsSettings), String> {
    let (rest, ours) = split(conn)?;
    let mut config = tokio_postgres::Config::from_str(&rest)
        .map_err(|e| format!("invalid PostgreSQL URL: {e}"))?;
    let value = |key: &str, env: &str| {
        ours.iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(env).ok().filter(|v| !v.is_empty()))
    };
    let mode = match value("sslmode", "PGSSLMODE") {
        Some(m) => SslMode::parse(&m)?,
        None => SslMode::Prefer,
    };
    let root_cert = value("sslrootcert", "PGSSLROOTCERT").map(|r| RootCert::parse(&r));
    config.ssl_mode(mode.negotiation());
    if config.get_password().is_none()
        && let Some(password) = password_elsewhere(&config)
    {
        config.password(password);
    }
    Ok((config, TlsSettings { mode, root_cert }))
}

/// The connection string without sked's own parameters, and those parameters.
fn split(conn: &str) -> Result<(String, Vec<(String, String)>), String> {
    let mut ours = Vec::new();
    let mut take = |key: &str, value: String| -> Result<bool, String> {
        if UNSUPPORTED.contains(&key) {
            return Err(format!(
                "{key} is not supported: sked does not present client certificates to PostgreSQL"
            ));
        }
        let mine = OURS.contains(&key);
        if mine {
            ours.push((key.to_string(), value));
        }
        Ok(mine)
    };
    if conn.starts_with("postgres://") || conn.starts_with("postgresql://") {
        let Some((base, query)) = conn.split_once('?') else {
            return Ok((conn.to_string(), ours));
        };
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
            if !take(&decode(k), decode(v))? {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, ours));
    }
    let mut kept = Vec::new();
    for (k, v) in key_values(conn)? {
        if !take(&k, v.clone())? {
            let quoted = v.replace('\\', "\\\\").replace('\'', "\\'");
            kept.push(format!("{k}='{quoted}'"));
        }
    }
    Ok((kept.join(" "), ours))
}

/// The pairs of a `key=value key='quoted value'` string, as libpq reads it.
fn key_values(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!(
                "invalid PostgreSQL connection string: expected = after {key:?}"
            ));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let quoted = chars.next_if_eq(&'\'').is_some();
        let mut value = String::new();
        loop {
            match chars.next() {
                None if quoted => {
                    return Err("invalid PostgreSQL connection string: unterminated quote".into());
                }
                None => break,
                Some('\'') if quoted => break,
                Some(c) if c.is_whitespace() && !quoted => break,
                Some('\\') => value.extend(chars.next()),
                Some(c) => value.push(c),
            }
        }
        pairs.push((key, value));
    }
}

/// The password from `PGPASSWORD`, else from the password file for the first host that has
/// a line there.
fn password_elsewhere(config: &tokio_postgres::Config) -> Option<String> {
    if let Some(p) = std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()) {
        return Some(p);
    }
    let file = match std::env::var_os("PGPASSFILE") {
        Some(f) => PathBuf::from(f),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".pgpass"),
    };
    let text = read_private(&file)?;
    let user = config.get_user()?;
    let dbname = config.get_dbname().unwrap_or(user);
    let ports = config.get_ports();
    config.get_hosts().iter().enumerate().find_map(|(i, host)| {
        let host = match host {
            Host::Tcp(h) => h.as_str(),
            // libpq matches a socket connection's host as "localhost".
            Host::Unix(_) => "localhost",
        };
        let port = ports
            .get(i)
            .or(ports.first())
            .copied()
            .unwrap_or(5432)
            .to_string();
        lookup(&text, [host, &port, dbname, user])
    })
}

/// The file's text, unless others may read it: like libpq, a password file with group or
/// world access is ignored, with a warning.
fn read_private(file: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(file).ok()?;
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(
            file = %file.display(),
            "password file has group or world access and is ignored; make it private (chmod 0600)"
        );
        return None;
    }
    std::fs::read_to_string(file).ok()
}

/// The password of the first line of a `.pgpass` text matching host, port, database and
/// user (`*` matches anything; `\:` and `\\` are a colon and a backslash).
fn lookup(text: &str, wanted: [&str; 4]) -> Option<String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|line| {
            let fields = pgpass_fields(line)?;
            let matches = fields[..4]
                .iter()
                .zip(wanted)
                .all(|(field, want)| field == "*" || field == want);
            matches.then(|| fields[4].clone())
        })
}

/// The five fields of a `.pgpass` line; the password is the rest of the line.
fn pgpass_fields(line: &str) -> Option<Vec<String>> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut()?.extend(chars.next()),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut()?.push(c),
        }
    }
    (fields.len() == 5).then_some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parameters_of_our_own_are_taken_out() {
        let (rest, ours) =
            split("postgres://u@h:5/db?sslmode=verify-full&application_name=x&sslrootcert=%2Ftmp%2Fca.pem")
                .unwrap();
        assert_eq!(rest, "postgres://u@h:5/db?application_name=x");
        assert_eq!(
            ours,
            [
                ("sslmode".to_string(), "verify-full".to_string()),
                ("sslrootcert".to_string(), "/tmp/ca.pem".to_string())
            ]
        );
        let (rest, _) = split("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(rest, "postgres://u@h/db");
    }

    #[test]
    fn key_value_strings_are_read_like_libpq() {
        let (rest, ours) =
            split("host=h  user = u password='a \\'b\\' c' sslmode=verify-ca dbname=d\\ b")
                .unwrap();
        assert_eq!(ours, [("sslmode".to_string(), "verify-ca".to_string())]);
        let config = tokio_postgres::Config::from_str(&rest).unwrap();
        assert_eq!(config.get_user(), Some("u"));
        assert_eq!(config.get_dbname(), Some("d b"));
        assert_eq!(config.get_password(), Some(&b"a 'b' c"[..]));
        assert!(split("host='h").is_err());
        assert!(split("host h").is_err());
    }

    #[test]
    fn modes_and_unsupported_parameters() {
        let (config, tls) = parse("postgres://u@h/db?sslmode=verify-full").unwrap();
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        let err = parse("postgres://u@h/db?sslmode=allow").unwrap_err();
        assert!(err.contains("invalid sslmode \"allow\""), "{err}");
        let err = parse("postgres://u@h/db?sslcert=/x").unwrap_err();
        assert!(err.contains("sslcert is not supported"), "{err}");
        let (_, tls) = parse("postgres://u@h/db?sslrootcert=system&sslmode=verify-ca").unwrap();
        assert_eq!(tls.root_cert, Some(RootCert::System));
    }

    #[test]
    fn pgpass_lines_match_field_by_field() {
        let text = "# comment\n\
                    other:5432:*:u:nope\n\
                    db\\:host:*:sked:u:pa:ss\\\\word\n\
                    *:*:*:*:fallback\n";
        assert_eq!(
            lookup(text, ["db:host", "5432", "sked", "u"]).as_deref(),
            Some("pa:ss\\word")
        );
        assert_eq!(
            lookup(text, ["h", "1", "d", "u"]).as_deref(),
            Some("fallback")
        );
        assert_eq!(lookup("a:b:c\n", ["a", "b", "c", "d"]), None);
    }
}
