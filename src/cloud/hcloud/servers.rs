//! The server list: who holds which private IP in the network, and which server
//! belongs to which node.
//!
//! A [`ServerSnapshot`] is one complete listing, indexed by ID, name and private IP in
//! the managed network. The [`ServerCache`] keeps the latest one and makes threads
//! that need a fresher one share a single listing instead of each paging through all
//! servers. It never decides what is stale: callers pass the age they accept.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::api::{ApiError, ServerJson};

/// A server as the routes code needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Server {
    pub id: u64,
    pub name: String,
    /// Its private IP in the managed network, if it is attached.
    pub ip: Option<Ipv4Addr>,
}

impl Server {
    /// The providerID a node of this server carries.
    pub(super) fn provider_id(&self) -> String {
        format!("hcloud://{}", self.id)
    }
}

/// One complete server listing, taken at `fetched_at` (when the listing started).
#[derive(Debug)]
pub(super) struct ServerSnapshot {
    fetched_at: Instant,
    servers: Vec<Server>,
    by_id: HashMap<u64, usize>,
    by_name: HashMap<String, usize>,
    by_ip: HashMap<Ipv4Addr, usize>,
}

impl ServerSnapshot {
    pub(super) fn new(
        list: Vec<ServerJson>,
        network_id: u64,
        fetched_at: Instant,
    ) -> ServerSnapshot {
        let servers: Vec<Server> = list
            .into_iter()
            .map(|s| Server {
                ip: s
                    .private_net
                    .iter()
                    .find(|p| p.network == network_id)
                    .and_then(|p| p.ip.parse().ok()),
                id: s.id,
                name: s.name,
            })
            .collect();
        let mut snapshot = ServerSnapshot {
            fetched_at,
            by_id: HashMap::with_capacity(servers.len()),
            by_name: HashMap::with_capacity(servers.len()),
            by_ip: HashMap::with_capacity(servers.len()),
            servers: Vec::new(),
        };
        for (i, s) in servers.iter().enumerate() {
            snapshot.by_id.insert(s.id, i);
            snapshot.by_name.insert(s.name.clone(), i);
            if let Some(ip) = s.ip {
                snapshot.by_ip.insert(ip, i);
            }
        }
        snapshot.servers = servers;
        snapshot
    }

    pub(super) fn by_id(&self, id: u64) -> Option<&Server> {
        self.by_id.get(&id).map(|&i| &self.servers[i])
    }

    pub(super) fn by_name(&self, name: &str) -> Option<&Server> {
        self.by_name.get(name).map(|&i| &self.servers[i])
    }

    /// The server whose private IP in the network is `ip`.
    pub(super) fn by_gateway(&self, ip: Ipv4Addr) -> Option<&Server> {
        self.by_ip.get(&ip).map(|&i| &self.servers[i])
    }

    pub(super) fn age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.fetched_at)
    }

    pub(super) fn len(&self) -> usize {
        self.servers.len()
    }
}

/// The latest snapshot, shared by all threads of the provider.
#[derive(Debug)]
pub(super) struct ServerCache {
    network_id: u64,
    state: Mutex<CacheState>,
    fetched: Condvar,
}

#[derive(Debug, Default)]
struct CacheState {
    snapshot: Option<Arc<ServerSnapshot>>,
    /// A thread is listing the servers; others wait for its result.
    fetching: bool,
    /// Listings finished, successful or not.
    generation: u64,
    /// The error of the last listing, with its generation.
    last_error: Option<(u64, ApiError)>,
}

impl ServerCache {
    pub(super) fn new(network_id: u64) -> ServerCache {
        ServerCache {
            network_id,
            state: Mutex::new(CacheState::default()),
            fetched: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, CacheState> {
        crate::sync::lock(&self.state)
    }

    /// A snapshot no older than `max_age`, listing the servers with `fetch` if there
    /// is none. A thread that finds another one listing waits for that listing and
    /// takes its result, whatever age it asked for: it cannot get anything fresher.
    pub(super) fn get(
        &self,
        max_age: Duration,
        fetch: impl FnOnce() -> Result<Vec<ServerJson>, ApiError>,
    ) -> Result<Arc<ServerSnapshot>, ApiError> {
        let mut state = self.lock();
        if let Some(s) = &state.snapshot
            && s.age(Instant::now()) <= max_age
        {
            return Ok(s.clone());
        }
        if state.fetching {
            let waited_for = state.generation + 1;
            while state.fetching && state.generation < waited_for {
                state = self.fetched.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            return match (&state.last_error, &state.snapshot) {
                (Some((generation, e)), _) if *generation == waited_for => Err(e.clone()),
                (_, Some(s)) => Ok(s.clone()),
                (_, None) => Err(ApiError::new(
                    crate::provider::CloudErrorKind::Retry { after: None },
                    "hcloud: the server list is not available yet",
                )),
            };
        }
        state.fetching = true;
        drop(state);
        let started = Instant::now();
        let result = fetch();
        let mut state = self.lock();
        state.fetching = false;
        state.generation += 1;
        let outcome = match result {
            Ok(list) => {
                let snapshot = Arc::new(ServerSnapshot::new(list, self.network_id, started));
                state.snapshot = Some(snapshot.clone());
                state.last_error = None;
                Ok(snapshot)
            }
            Err(e) => {
                state.last_error = Some((state.generation, e.clone()));
                Err(e)
            }
        };
        self.fetched.notify_all();
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::hcloud::api::PrivateNetJson;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn server(id: u64, name: &str, nets: &[(u64, &str)]) -> ServerJson {
        ServerJson {
            id,
            name: name.into(),
            private_net: nets
                .iter()
                .map(|(network, ip)| PrivateNetJson {
                    network: *network,
                    ip: ip.to_string(),
                })
                .collect(),
        }
    }

    #[test]
    fn snapshot_indexes_the_private_ip_of_the_managed_network_only() {
        let t0 = Instant::now();
        let s = ServerSnapshot::new(
            vec![
                server(1, "a", &[(9, "10.9.0.2"), (7, "10.0.0.2")]),
                server(2, "b", &[(9, "10.9.0.3")]),
            ],
            7,
            t0,
        );
        assert_eq!(
            s.by_gateway("10.0.0.2".parse().unwrap()).map(|s| s.id),
            Some(1)
        );
        assert_eq!(s.by_gateway("10.9.0.3".parse().unwrap()), None);
        assert_eq!(s.by_id(2).map(|s| s.ip), Some(None));
        assert_eq!(
            s.by_name("a").map(|s| s.provider_id()),
            Some("hcloud://1".into())
        );
        assert_eq!(s.age(t0 + Duration::from_secs(3)), Duration::from_secs(3));
    }

    #[test]
    fn concurrent_callers_share_one_listing() {
        let cache = Arc::new(ServerCache::new(7));
        let listings = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (cache, listings) = (cache.clone(), listings.clone());
                std::thread::spawn(move || {
                    cache
                        .get(Duration::from_secs(10), || {
                            listings.fetch_add(1, Ordering::SeqCst);
                            // Long enough for every thread to arrive while listing.
                            std::thread::sleep(Duration::from_millis(200));
                            Ok(vec![server(1, "a", &[(7, "10.0.0.2")])])
                        })
                        .map(|s| s.len())
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), Ok(1));
        }
        assert_eq!(listings.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_fresh_snapshot_is_reused_and_an_old_one_listed_again() {
        let cache = ServerCache::new(7);
        let calls = AtomicUsize::new(0);
        let fetch = || {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(vec![])
        };
        cache.get(Duration::from_secs(10), fetch).unwrap();
        cache.get(Duration::from_secs(10), fetch).unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        cache.get(Duration::ZERO, fetch).unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_failed_listing_is_reported_and_the_next_call_lists_again() {
        let cache = ServerCache::new(7);
        let err = ApiError::new(
            crate::provider::CloudErrorKind::Retry { after: None },
            "down",
        );
        assert_eq!(
            cache
                .get(Duration::from_secs(10), || Err(err.clone()))
                .unwrap_err(),
            err
        );
        assert!(cache.get(Duration::from_secs(10), || Ok(vec![])).is_ok());
    }
}
