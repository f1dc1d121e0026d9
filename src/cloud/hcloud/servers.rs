//! The server list: who holds which private IP in the network, and which server
//! belongs to which node.
//!
//! A [`ServerSnapshot`] is one complete listing, indexed by ID, name and private IP in
//! the managed network. The [`ServerCache`] keeps the latest one and makes threads
//! that need a fresher one share a single listing instead of each paging through all
//! servers. It never decides what is stale: callers pass the age they accept.

use std::net::Ipv4Addr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::api::{ApiError, ServerJson};

/// A server as the routes code needs it: a view into a [`ServerSnapshot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Server<'a> {
    pub id: u64,
    pub name: &'a str,
    /// Its private IP in the managed network, if it is attached.
    pub ip: Option<Ipv4Addr>,
}

impl Server<'_> {
    /// The providerID a node of this server carries.
    pub(super) fn provider_id(&self) -> String {
        format!("hcloud://{}", self.id)
    }
}

/// Servers as a listing gathers them, page by page: compact from the first page on,
/// so that a listing of 50 000 servers is never held as decoded JSON (about 160 bytes
/// a server, 8 MB, against 24 and the name here).
#[derive(Debug, Default)]
pub(super) struct ServerList {
    /// Every server's name, end to end.
    names: String,
    servers: Vec<Entry>,
}

/// A server of a [`ServerList`]: its ID, where its name ends in `names`, and its
/// private IP in the managed network.
#[derive(Clone, Copy, Debug)]
struct Entry {
    id: u64,
    name_end: u32,
    ip: Option<Ipv4Addr>,
}

impl ServerList {
    /// Adds one server of a page; `network_id` is the managed network.
    pub(super) fn push(&mut self, server: ServerJson, network_id: u64) {
        self.names.push_str(&server.name);
        self.servers.push(Entry {
            id: server.id,
            // A project with 4 GiB of server names does not exist.
            name_end: u32::try_from(self.names.len()).unwrap_or(u32::MAX),
            ip: server
                .private_net
                .iter()
                .find(|p| p.network == network_id)
                .and_then(|p| p.ip.parse().ok()),
        });
    }

    /// The servers in listing order.
    #[cfg(test)]
    pub(super) fn of(list: Vec<ServerJson>, network_id: u64) -> ServerList {
        let mut servers = ServerList::default();
        for s in list {
            servers.push(s, network_id);
        }
        servers
    }
}

/// One complete server listing, taken at `fetched_at` (when the listing started).
///
/// Indexed by sorted vectors of positions rather than hash maps, the names in one
/// string: about 40 bytes a server and its name, against some 85 with a `String` a
/// server and some 250 with a map per key. Where two servers share a key (never in a
/// consistent listing), one wins: of a shared ID the one listed last, as with the maps
/// before; of a shared name or IP the one with the higher ID.
#[derive(Debug)]
pub(super) struct ServerSnapshot {
    fetched_at: Instant,
    names: String,
    /// Sorted by ID (stable: listing order among equal IDs); each with where its name
    /// starts in `names` (names are not in ID order).
    servers: Vec<(Entry, u32)>,
    /// Positions in `servers`, sorted by name.
    by_name: Vec<u32>,
    /// Private IPs in the managed network and positions in `servers`, sorted by IP.
    by_ip: Vec<(Ipv4Addr, u32)>,
}

impl ServerSnapshot {
    pub(super) fn new(list: ServerList, fetched_at: Instant) -> ServerSnapshot {
        let ServerList { mut names, servers } = list;
        names.shrink_to_fit();
        let mut start = 0;
        let mut servers: Vec<(Entry, u32)> = servers
            .into_iter()
            .map(|e| {
                let s = start;
                start = e.name_end;
                (e, s)
            })
            .collect();
        // In place, the listing order breaking ties (the name's start grows with it).
        servers.sort_unstable_by_key(|&(e, start)| (e.id, start));
        servers.shrink_to_fit();
        // Positions fit in u32: a project holds far fewer servers than that.
        let positions = 0..u32::try_from(servers.len()).unwrap_or(u32::MAX);
        let name = |i: u32| {
            let (e, start) = servers[i as usize];
            names.get(start as usize..e.name_end as usize).unwrap_or("")
        };
        let mut by_name: Vec<u32> = positions.clone().collect();
        by_name.sort_unstable_by(|&a, &b| name(a).cmp(name(b)).then(a.cmp(&b)));
        let mut by_ip: Vec<(Ipv4Addr, u32)> = positions
            .filter_map(|i| Some((servers[i as usize].0.ip?, i)))
            .collect();
        by_ip.sort_unstable();
        ServerSnapshot {
            fetched_at,
            names,
            servers,
            by_name,
            by_ip,
        }
    }

    fn at(&self, i: u32) -> Server<'_> {
        let (e, start) = self.servers[i as usize];
        Server {
            id: e.id,
            name: self
                .names
                .get(start as usize..e.name_end as usize)
                .unwrap_or(""),
            ip: e.ip,
        }
    }

    pub(super) fn by_id(&self, id: u64) -> Option<Server<'_>> {
        let end = self.servers.partition_point(|(e, _)| e.id <= id);
        let last = end.checked_sub(1)?;
        let server = self.at(u32::try_from(last).ok()?);
        (server.id == id).then_some(server)
    }

    pub(super) fn by_name(&self, name: &str) -> Option<Server<'_>> {
        let &i = last_equal(&self.by_name, |&i| self.at(i).name.cmp(name))?;
        Some(self.at(i))
    }

    /// The server whose private IP in the network is `ip`.
    pub(super) fn by_gateway(&self, ip: Ipv4Addr) -> Option<Server<'_>> {
        let &(_, i) = last_equal(&self.by_ip, |(at, _)| at.cmp(&ip))?;
        Some(self.at(i))
    }

    pub(super) fn age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.fetched_at)
    }

    pub(super) fn len(&self) -> usize {
        self.servers.len()
    }
}

/// The last element of sorted `items` that `order` finds equal to the key it compares
/// against (`order` says how an element compares to the key).
fn last_equal<T>(items: &[T], order: impl Fn(&T) -> std::cmp::Ordering) -> Option<&T> {
    let end = items.partition_point(|x| order(x) != std::cmp::Ordering::Greater);
    let last = items.get(end.checked_sub(1)?)?;
    (order(last) == std::cmp::Ordering::Equal).then_some(last)
}

/// The latest snapshot, shared by all threads of the provider.
#[derive(Debug)]
pub(super) struct ServerCache {
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
    pub(super) fn new() -> ServerCache {
        ServerCache {
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
        fetch: impl FnOnce() -> Result<ServerList, ApiError>,
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
        // The old snapshot is stale for this caller; keeping it while the new one is
        // listed and indexed would hold two (megabytes each at 50 000 servers) at the
        // peak. Threads that still use it keep their own `Arc`.
        state.snapshot = None;
        drop(state);
        let started = Instant::now();
        let result = fetch();
        let mut state = self.lock();
        state.fetching = false;
        state.generation += 1;
        let outcome = match result {
            Ok(list) => {
                let snapshot = Arc::new(ServerSnapshot::new(list, started));
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
            ServerList::of(
                vec![
                    server(1, "a", &[(9, "10.9.0.2"), (7, "10.0.0.2")]),
                    server(2, "b", &[(9, "10.9.0.3")]),
                ],
                7,
            ),
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

    /// Guards the sorted indexes of `ServerSnapshot`: every server of a listing in no
    /// particular order is found by ID, name and IP, a key that is absent (between,
    /// before or after the present ones) finds nothing, and of two servers with one
    /// key the one listed last wins, as with the hash maps before.
    #[test]
    fn snapshot_finds_every_server_of_a_shuffled_listing_and_the_last_of_a_shared_key() {
        let ids: Vec<u64> = (0..200).map(|k| (k * 37) % 200 * 2 + 10).collect();
        let mut list: Vec<ServerJson> = ids
            .iter()
            .map(|&id| {
                let ip = format!("10.0.{}.{}", id / 250, id % 250 + 2);
                server(id, &format!("srv-{id}"), &[(7, &ip)])
            })
            .collect();
        list.push(server(10, "dup", &[(7, "10.0.0.12")]));
        let s = ServerSnapshot::new(ServerList::of(list, 7), Instant::now());
        for &id in &ids[1..] {
            assert_eq!(
                s.by_id(id).map(|s| s.name),
                Some(format!("srv-{id}").as_str())
            );
            assert_eq!(s.by_name(&format!("srv-{id}")).map(|s| s.id), Some(id));
            let ip = format!("10.0.{}.{}", id / 250, id % 250 + 2)
                .parse()
                .unwrap();
            assert_eq!(s.by_gateway(ip).map(|s| s.id), Some(id));
        }
        for absent in [0, 11, 409, 10_000] {
            assert_eq!(s.by_id(absent), None, "id {absent}");
        }
        assert_eq!(s.by_name("srv-11"), None);
        assert_eq!(s.by_name(""), None);
        assert_eq!(s.by_name("zzz"), None);
        assert_eq!(s.by_gateway("10.0.0.13".parse().unwrap()), None);
        assert_eq!(s.by_gateway("10.9.0.2".parse().unwrap()), None);
        // ID 10 and IP 10.0.0.12 were listed twice: the later server counts.
        assert_eq!(s.by_id(10).map(|s| s.name), Some("dup"));
        assert_eq!(
            s.by_gateway("10.0.0.12".parse().unwrap()).map(|s| s.name),
            Some("dup")
        );
        assert_eq!(s.by_name("srv-10").map(|s| s.id), Some(10));
    }

    #[test]
    fn concurrent_callers_share_one_listing() {
        let cache = Arc::new(ServerCache::new());
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
                            Ok(ServerList::of(vec![server(1, "a", &[(7, "10.0.0.2")])], 7))
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
        let cache = ServerCache::new();
        let calls = AtomicUsize::new(0);
        let fetch = || {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(ServerList::default())
        };
        cache.get(Duration::from_secs(10), fetch).unwrap();
        cache.get(Duration::from_secs(10), fetch).unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        cache.get(Duration::ZERO, fetch).unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn an_old_snapshot_is_not_held_while_the_new_one_is_listed() {
        let cache = ServerCache::new();
        let old = Arc::downgrade(
            &cache
                .get(Duration::ZERO, || Ok(ServerList::default()))
                .unwrap(),
        );
        cache
            .get(Duration::ZERO, || {
                assert!(old.upgrade().is_none(), "the old snapshot is still held");
                Ok(ServerList::default())
            })
            .unwrap();
    }

    #[test]
    fn a_failed_listing_is_reported_and_the_next_call_lists_again() {
        let cache = ServerCache::new();
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
        assert!(
            cache
                .get(Duration::from_secs(10), || Ok(ServerList::default()))
                .is_ok()
        );
    }
}
