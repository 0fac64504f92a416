//! The sentinel URL form and the builder's arguments, read into a [`SentinelSpec`].

use super::server_client;
use crate::error::{Error, Result};

/// The URL scheme that names a master through its sentinels:
/// `redis+sentinel://[user:pass@]host:port[,host:port...]/<master-name>[/db][?query]`.
pub(crate) const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// A master named through sentinels, as the user gave it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SentinelSpec {
    /// The name the sentinels monitor the master under.
    pub master: String,
    /// `host:port` of each sentinel.
    pub sentinels: Vec<String>,
    /// `user:pass@`, or empty.
    pub credentials: String,
    /// The master's database number.
    pub db: i64,
    /// `?query` for the master's URL (protocol, client name, ...), or empty.
    pub query: String,
}

impl SentinelSpec {
    /// Reads what follows [`SENTINEL_SCHEME`]. Never fails: [`SentinelSpec::check`] does, at
    /// connect, so that `Client::builder` stays infallible.
    pub(crate) fn parse(rest: &str) -> SentinelSpec {
        let (before_query, query) = match rest.find('?') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (authority, path) = match before_query.find('/') {
            Some(i) => (&before_query[..i], &before_query[i + 1..]),
            None => (before_query, ""),
        };
        let (credentials, hosts) = match authority.rfind('@') {
            Some(i) => (&authority[..=i], &authority[i + 1..]),
            None => ("", authority),
        };
        let mut segments = path.split('/');
        let master = segments.next().unwrap_or("").to_owned();
        let db = match segments.next() {
            None | Some("") => 0,
            // An unreadable db is kept as -1 and refused by `check`.
            Some(db) => db.parse().unwrap_or(-1),
        };
        SentinelSpec {
            master,
            sentinels: hosts
                .split(',')
                .filter(|host| !host.is_empty())
                .map(str::to_owned)
                .collect(),
            credentials: credentials.to_owned(),
            db: if segments.next().is_some() { -1 } else { db },
            query: query.to_owned(),
        }
    }

    /// The spec of `Client::builder_sentinel`: each sentinel as `host:port` or
    /// `redis://[user:pass@]host:port[/db][?query]`; the credentials, db and query of the first
    /// sentinel that gives them are used as those of the URL form are.
    pub(crate) fn from_parts(master: String, sentinels: Vec<String>) -> SentinelSpec {
        let mut spec = SentinelSpec {
            master: master.clone(),
            ..SentinelSpec::default()
        };
        let mut settled = false;
        for sentinel in sentinels {
            let rest = sentinel.strip_prefix("redis://").unwrap_or(&sentinel);
            let (authority, after) = match rest.find(['/', '?']) {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let one = SentinelSpec::parse(&format!("{authority}/{master}{after}"));
            spec.sentinels.extend(one.sentinels);
            if spec.credentials.is_empty() {
                spec.credentials = one.credentials;
            }
            if !settled && !after.is_empty() {
                (spec.db, spec.query, settled) = (one.db, one.query, true);
            }
        }
        spec
    }

    /// Refuses a spec that cannot work, before anything is sent.
    pub(super) fn check(&self) -> Result<()> {
        if self.master.is_empty() {
            return Err(Error::InvalidArgument(
                "a sentinel URL names the master: redis+sentinel://host:port[,host:port...]/<master-name>[/db]".into(),
            ));
        }
        if self.sentinels.is_empty() {
            return Err(Error::InvalidArgument(
                "Redis Sentinel needs at least one sentinel address".into(),
            ));
        }
        if self.db < 0 {
            return Err(Error::InvalidArgument(
                "the database of a sentinel URL must be a number: .../<master-name>/<db>".into(),
            ));
        }
        for url in self
            .sentinel_urls(true)
            .iter()
            .chain([&self.master_url("h:1")])
        {
            server_client(url)?;
        }
        Ok(())
    }

    /// The master's URL at `addr` (`host:port`).
    pub(super) fn master_url(&self, addr: &str) -> String {
        let (credentials, db, query) = (&self.credentials, self.db, &self.query);
        format!("redis://{credentials}{addr}/{db}{query}")
    }

    /// The URL of every sentinel, with the master's credentials or without any.
    pub(super) fn sentinel_urls(&self, with_credentials: bool) -> Vec<String> {
        let credentials = if with_credentials {
            self.credentials.as_str()
        } else {
            ""
        };
        self.sentinels
            .iter()
            .map(|host| format!("redis://{credentials}{host}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_names_sentinels_master_db_and_query() {
        let spec = SentinelSpec::parse("u:p@a:1,b:2/mymaster/3?protocol=2");
        assert_eq!(spec.sentinels, ["a:1", "b:2"]);
        assert_eq!(spec.master, "mymaster");
        assert_eq!(spec.db, 3);
        assert_eq!(spec.credentials, "u:p@");
        assert_eq!(spec.master_url("h:9"), "redis://u:p@h:9/3?protocol=2");
        assert_eq!(spec.sentinel_urls(false), ["redis://a:1", "redis://b:2"]);
        assert!(spec.check().is_ok());

        let plain = SentinelSpec::parse("a:1/m");
        assert_eq!((plain.master.as_str(), plain.db), ("m", 0));
        assert!(plain.check().is_ok());
    }

    #[test]
    fn bad_urls_are_refused() {
        for rest in ["a:1", "a:1/", "/m", "a:1/m/x", "a:1/m/1/2"] {
            let spec = SentinelSpec::parse(rest);
            assert!(
                matches!(spec.check(), Err(Error::InvalidArgument(_))),
                "{rest}: {spec:?}"
            );
        }
    }

    #[test]
    fn builder_parts_share_the_first_credentials() {
        let spec = SentinelSpec::from_parts(
            "m".into(),
            vec!["redis://:pw@a:1/2?protocol=2".into(), "b:2".into()],
        );
        assert_eq!(spec.sentinels, ["a:1", "b:2"]);
        assert_eq!(spec.credentials, ":pw@");
        assert_eq!(spec.master_url("h:9"), "redis://:pw@h:9/2?protocol=2");
    }
}
