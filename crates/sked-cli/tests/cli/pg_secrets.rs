//! The database's secrets and TLS, on a private PostgreSQL cluster that only takes TLS
//! connections with a password (a self-signed certificate for `localhost`): every `sslmode`,
//! the password from the URL, `PGPASSWORD`, a password file and `--db-file`, and the password
//! never printed, whether the server starts or not.

use std::process::Command;

use crate::common::private_pg::PrivatePg;
use crate::common::{SKED, Server, http_get};

const SECRET: &str = "SECRET-pw-5e1f";

/// Runs the openssl command in `dir`, which must succeed; what it printed.
fn openssl(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (the command) makes the test's certificates");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A cluster with TLS on, refusing connections without it, and a `sked` role with a
/// password; the file of the authority that signed its certificate.
fn tls_cluster(dir: &std::path::Path) -> Option<(PrivatePg, String)> {
    let pg = PrivatePg::init()?;
    // A private certificate authority, and the server's certificate for localhost signed by it.
    let openssl = |args: &[&str]| openssl(dir, args);
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=sked test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "server.crt",
    ]);
    let (cert, key, ca) = (
        dir.join("server.crt"),
        dir.join("server.key"),
        dir.join("ca.crt"),
    );
    let cert_text = std::fs::read_to_string(&cert).unwrap();
    pg.write_data_file("server.crt", &cert_text);
    pg.write_data_file("server.key", &std::fs::read_to_string(&key).unwrap());
    pg.write_data_file(
        "pg_hba.conf",
        "local all all trust\n\
         hostssl all all 127.0.0.1/32 scram-sha-256\n\
         host all all 127.0.0.1/32 reject\n",
    );
    pg.configure("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'");
    pg.start();
    pg.psql(&format!("CREATE ROLE sked LOGIN PASSWORD '{SECRET}'"));
    pg.psql("CREATE DATABASE sked OWNER sked");
    Some((pg, ca.display().to_string()))
}

/// `sked server` that does not start: its exit code and everything it printed.
fn refused(dir: &std::path::Path, db: &str, env: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(SKED)
        .args(["server", "--listen", "127.0.0.1:0", "--db", db])
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{db} was taken: {all}");
    assert!(!all.contains(SECRET), "the password was printed: {all}");
    (out.status.code().unwrap_or(-1), all)
}

/// A server that started: it works, its connections are encrypted, and its log, `/healthz`
/// and dashboard page never show the password.
fn check_served(pg: &PrivatePg, srv: Server, dir: &std::path::Path, log: &str) {
    let id = srv.ok(&["task", "add", "--kind", "k"]);
    assert!(!id.trim().is_empty());
    let (_, health) = http_get(&srv.url, "/healthz").unwrap();
    let (_, page) = http_get(&srv.url, "/").unwrap();
    // The server's connections, with TLS and without: "encrypted|plain".
    let sessions = pg.psql(
        "SELECT count(*) FILTER (WHERE ssl), count(*) FILTER (WHERE NOT ssl) \
         FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE usename = 'sked'",
    );
    drop(srv);
    let text = std::fs::read_to_string(dir.join(log)).unwrap();
    let (encrypted, plain) = sessions.trim().split_once('|').unwrap();
    assert!(encrypted.parse::<u32>().unwrap() >= 2, "{sessions} {text}");
    assert_eq!(plain, "0", "{sessions}");
    assert!(text.contains("sked server listening"), "{text}");
    assert!(!text.contains("listener disconnected"), "{text}");
    for (what, text) in [("log", &text), ("/healthz", &health), ("/", &page)] {
        assert!(!text.contains(SECRET), "{what}: {text}");
    }
}

#[test]
fn postgres_over_tls_with_the_password_kept_out_of_sight() {
    let dir = tempfile::tempdir().unwrap();
    let Some((pg, cert)) = tls_cluster(dir.path()) else {
        return;
    };
    let port = pg.port;
    let home = dir.path().display().to_string();
    // Nothing from the test machine's own home (a ~/.pgpass, ~/.postgresql/root.crt).
    let env = [("HOME", home.as_str())];

    // The password in the URL; sslmode=require encrypts without checking the certificate.
    let url = format!("postgres://sked:{SECRET}@127.0.0.1:{port}/sked?sslmode=require");
    let srv = Server::start_on(dir.path(), &url, &[], &env, "require.log");
    check_served(&pg, srv, dir.path(), "require.log");

    // verify-full: the certificate chains to the given root and names the host.
    let url =
        format!("postgres://sked@localhost:{port}/sked?sslmode=verify-full&sslrootcert={cert}");
    let with_password = [("HOME", home.as_str()), ("PGPASSWORD", SECRET)];
    let srv = Server::start_on(dir.path(), &url, &[], &with_password, "full.log");
    check_served(&pg, srv, dir.path(), "full.log");

    // verify-ca over an address the certificate does not name, the password from a file.
    let pgpass = dir.path().join("pgpass");
    std::fs::write(
        &pgpass,
        format!("# sked\n127.0.0.1:{port}:sked:sked:{SECRET}\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    let pgpass_env = pgpass.display().to_string();
    let url = format!("postgres://sked@127.0.0.1:{port}/sked?sslmode=verify-ca&sslrootcert={cert}");
    let from_file = [("HOME", home.as_str()), ("PGPASSFILE", pgpass_env.as_str())];
    let srv = Server::start_on(dir.path(), &url, &[], &from_file, "ca.log");
    check_served(&pg, srv, dir.path(), "ca.log");

    // The whole URL, password and all, from --db-file (and a key=value string).
    let db_file = dir.path().join("db-url");
    std::fs::write(
        &db_file,
        format!(
            "host=127.0.0.1 port={port} dbname=sked user=sked password='{SECRET}' sslmode=require\n"
        ),
    )
    .unwrap();
    let flags = ["--db-file", db_file.to_str().unwrap()];
    let srv = Server::start_with(dir.path(), &flags, &env, "file.log");
    check_served(&pg, srv, dir.path(), "file.log");

    // Refused, each saying why and never showing the password.
    let secret_url =
        |query: &str| format!("postgres://sked:{SECRET}@127.0.0.1:{port}/sked?{query}");
    let (_, why) = refused(dir.path(), &secret_url("sslmode=disable"), &env);
    assert!(why.contains("no encryption"), "{why}");
    let (_, why) = refused(
        dir.path(),
        &secret_url(&format!("sslmode=verify-full&sslrootcert={cert}")),
        &env,
    );
    assert!(why.contains("certificate"), "{why}");
    let (code, why) = refused(dir.path(), &secret_url("sslmode=verify-full"), &env);
    assert_eq!(code, 2, "{why}");
    assert!(why.contains("root certificate"), "{why}");
    let wrong = format!("postgres://sked:{SECRET}x@127.0.0.1:{port}/sked?sslmode=require");
    let (_, why) = refused(dir.path(), &wrong, &env);
    assert!(why.contains("password authentication failed"), "{why}");
    // A password file others can read is ignored, as libpq does.
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).unwrap();
    let url = format!("postgres://sked@127.0.0.1:{port}/sked?sslmode=require");
    let (_, why) = refused(dir.path(), &url, &from_file);
    assert!(
        why.contains("password file has group or world access"),
        "{why}"
    );
}

/// `--token-file` and `SKED_TOKEN_FILE` give the token without putting it on the command line.
#[test]
fn the_token_comes_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "tok-from-file\n").unwrap();
    let path = file.to_str().unwrap();
    let db = format!("sqlite://{}", dir.path().join("sked.db").display());
    let srv = Server::start_with(
        dir.path(),
        &["--db", &db],
        &[("SKED_TOKEN_FILE", path)],
        "server.log",
    );
    let (status, _) = http_get(&srv.url, "/v1/tasks").unwrap();
    assert_eq!(status, 401);
    let run = |args: &[&str]| {
        Command::new(SKED)
            .args(args)
            .args(["task", "ls", "--server", &srv.url])
            .env_remove("SKED_TOKEN")
            .output()
            .unwrap()
    };
    assert!(run(&["--token-file", path]).status.success());
    assert!(!run(&[]).status.success());
    let missing = run(&["--token-file", "/nonexistent/token"]);
    assert_eq!(missing.status.code(), Some(2));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("cannot read --token-file /nonexistent/token"),
        "{err}"
    );
    let both = run(&["--token-file", path, "--token", "x"]);
    assert_eq!(both.status.code(), Some(2));
}

/// A server certificate of X.509 version 1 (no extensions: what Citus makes, and many older
/// self-made certificates are): `prefer` and `require` connect, as libpq does, for they check
/// no certificate; `verify-full` refuses it.
#[test]
fn an_x509_v1_certificate_is_taken_where_no_certificate_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let Some(pg) = PrivatePg::init() else {
        return;
    };
    let openssl = |args: &[&str]| openssl(dir.path(), args);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "v1.key",
        "-out",
        "v1.csr",
    ]);
    // `x509 -req` without extensions makes a version 1 certificate.
    openssl(&[
        "x509", "-req", "-in", "v1.csr", "-signkey", "v1.key", "-days", "2", "-out", "v1.crt",
    ]);
    let text = openssl(&["x509", "-noout", "-text", "-in", "v1.crt"]);
    assert!(text.contains("Version: 1 (0x0)"), "{text}");
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    pg.write_data_file("server.crt", &read("v1.crt"));
    pg.write_data_file("server.key", &read("v1.key"));
    pg.write_data_file(
        "pg_hba.conf",
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 reject\n",
    );
    pg.configure("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'");
    pg.start();
    pg.psql("CREATE ROLE sked LOGIN");
    pg.psql("CREATE DATABASE sked OWNER sked");
    let home = dir.path().display().to_string();
    let env = [("HOME", home.as_str())];
    let port = pg.port;
    for mode in ["prefer", "require"] {
        let url = format!("postgres://sked@127.0.0.1:{port}/sked?sslmode={mode}");
        let log = format!("{mode}.log");
        let srv = Server::start_on(dir.path(), &url, &[], &env, &log);
        let id = srv.ok(&["task", "add", "--kind", "k"]);
        assert!(!id.trim().is_empty(), "{mode}");
    }
    let cert = dir.path().join("v1.crt").display().to_string();
    let url =
        format!("postgres://sked@localhost:{port}/sked?sslmode=verify-full&sslrootcert={cert}");
    let (_, why) = refused(dir.path(), &url, &env);
    assert!(why.contains("certificate"), "{why}");
}
