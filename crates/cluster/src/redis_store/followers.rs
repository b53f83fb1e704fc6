//! The follower registry: who holds the event consumers coordinators create on request
//! (`parley.debates.follow`), so the follower caps hold across every coordinator replica and
//! under concurrent requests.
//!
//! # Keys (one hash tag, so the scripts work on Redis Cluster)
//! - `parley:{followers}:all`: consumer name → expiry (Redis's clock, Unix ms).
//! - `parley:{followers}:c:<identity>`: the same, for one requester identity (the NATS user
//!   of `parley.debates.follow.<user>`; `-` for the bare subject).
//! - `parley:{followers}:d:<debate>`: the same, for one debate.
//! - `parley:{followers}:owner`: consumer name → its identity and debate (for refreshes).
//!
//! # Semantics
//! - [`RedisStore::reserve_follower`] is one script: it drops expired entries, checks the
//!   caps (total minus the share reserved for `serve`, per identity, per debate) and only
//!   then adds the name to all three sets. Two concurrent requests can never both take the
//!   last place.
//! - An entry lives [`FOLLOWER_ENTRY_TTL`] unless refreshed: each coordinator lists the
//!   events stream's consumers every few seconds and [`RedisStore::refresh_followers`]
//!   extends the entries of those that still exist and removes the others (past a short
//!   grace for reservations whose consumer is being created). A consumer the server removed
//!   (30 s without a pull) leaves the registry at the next refresh — at once when a request
//!   meets a full cap (the coordinator refreshes and asks once more); one being read stays
//!   counted. The account allows 1,000 consumers, so one script call takes every name.
//! - A reservation whose consumer could not be created is released at once
//!   ([`RedisStore::release_follower`]).

use std::time::Duration;

use redis::Script;

use super::{RedisStore, Result};

/// How long a registry entry lives without a refresh: above the server's 30 s inactivity
/// threshold of a follower consumer, plus a few refresh periods.
pub const FOLLOWER_ENTRY_TTL: Duration = Duration::from_secs(45);

const ALL: &str = "parley:{followers}:all";
const OWNER: &str = "parley:{followers}:owner";

fn client_key(identity: &str) -> String {
    let identity = if identity.is_empty() { "-" } else { identity };
    format!("parley:{{followers}}:c:{identity}")
}

fn debate_key(debate: &str) -> String {
    format!("parley:{{followers}}:d:{debate}")
}

/// The caps a follow request is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerCaps {
    /// Followers open at once in the whole cluster.
    pub total: usize,
    /// Of `total`, the places only `serve` (the web front end) may take.
    pub reserved_for_serve: usize,
    /// Followers one requester identity may hold at once.
    pub per_client: usize,
    /// Followers of one debate at once.
    pub per_debate: usize,
}

impl FollowerCaps {
    /// The caps that go with a cluster-wide `total`: an eighth of it reserved for `serve`,
    /// a sixteenth (at least 4) per client identity, 16 per debate (at most the total).
    pub fn for_total(total: usize) -> Self {
        let total = total.max(1);
        Self {
            total,
            reserved_for_serve: total / 8,
            per_client: (total / 16).max(4).min(total),
            per_debate: 16.min(total),
        }
    }
}

/// The answer of [`RedisStore::reserve_follower`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// The place is taken; create the consumer.
    Granted,
    /// Refused by the named cap: `total`, `client` or `debate`.
    Refused(&'static str),
}

static RESERVE: std::sync::OnceLock<Script> = std::sync::OnceLock::new();
static REFRESH: std::sync::OnceLock<Script> = std::sync::OnceLock::new();
static RELEASE: std::sync::OnceLock<Script> = std::sync::OnceLock::new();

/// KEYS: all, client, debate, owner. ARGV: name, ttl ms, room for this identity in the
/// total, per-client cap, per-debate cap, owner value.
const RESERVE_SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, 3 do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now) end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 'total' end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return 'client' end
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[5]) then return 'debate' end
local ttl = tonumber(ARGV[2])
for i = 1, 3 do
  redis.call('ZADD', KEYS[i], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[i], ttl)
end
redis.call('HSET', KEYS[4], ARGV[1], ARGV[6] .. '\n' .. now)
redis.call('PEXPIRE', KEYS[4], ttl)
return 'ok'
"#;

/// KEYS: all, owner. ARGV: ttl ms, grace ms, then the names of every follower consumer
/// that exists. Extends the entries of those names; removes the entries of the others
/// unless reserved within the grace (a new reservation's consumer may not be listed yet).
/// The owner hash holds `client key \n debate key \n reserved at (ms)`. Returns the
/// entries kept.
const REFRESH_SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local grace = tonumber(ARGV[2])
local live = {}
for i = 3, #ARGV do live[ARGV[i]] = true end
local function owner_of(name)
  local owner = redis.call('HGET', KEYS[2], name)
  if not owner then return nil, nil, 0 end
  local parts = {}
  for part in string.gmatch(owner, '[^\n]+') do parts[#parts + 1] = part end
  if #parts < 3 then return nil, nil, 0 end
  return parts[1], parts[2], tonumber(parts[3]) or 0
end
local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local kept = 0
for i = 1, #entries, 2 do
  local name = entries[i]
  local ck, dk, reserved = owner_of(name)
  if live[name] then
    redis.call('ZADD', KEYS[1], now + ttl, name)
    if ck then
      redis.call('ZADD', ck, 'XX', now + ttl, name)
      redis.call('PEXPIRE', ck, ttl)
      redis.call('ZADD', dk, 'XX', now + ttl, name)
      redis.call('PEXPIRE', dk, ttl)
    end
    kept = kept + 1
  elseif reserved < now - grace then
    redis.call('ZREM', KEYS[1], name)
    if ck then
      redis.call('ZREM', ck, name)
      redis.call('ZREM', dk, name)
    end
    redis.call('HDEL', KEYS[2], name)
  else
    kept = kept + 1
  end
end
if kept > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
local names = redis.call('HKEYS', KEYS[2])
for _, name in ipairs(names) do
  if not redis.call('ZSCORE', KEYS[1], name) then redis.call('HDEL', KEYS[2], name) end
end
return kept
"#;

/// KEYS: all, client, debate, owner. ARGV: name.
const RELEASE_SCRIPT: &str = r#"
for i = 1, 3 do redis.call('ZREM', KEYS[i], ARGV[1]) end
redis.call('HDEL', KEYS[4], ARGV[1])
return 1
"#;

/// A reservation younger than this is kept by a refresh that does not list its consumer
/// (created after the listing, or being created).
pub const REFRESH_GRACE: Duration = Duration::from_secs(5);

impl RedisStore {
    /// Takes a place for the follower consumer `name` of `debate` asked for by `identity`
    /// (empty: the bare subject), atomically against every cap (see the module docs).
    pub async fn reserve_follower(
        &self,
        name: &str,
        identity: &str,
        debate: &str,
        caps: FollowerCaps,
    ) -> Result<Reservation> {
        let room = if identity == "serve" {
            caps.total
        } else {
            caps.total.saturating_sub(caps.reserved_for_serve)
        };
        let (ck, dk) = (client_key(identity), debate_key(debate));
        let script = RESERVE.get_or_init(|| Script::new(RESERVE_SCRIPT));
        let answer: String = script
            .key(ALL)
            .key(&ck)
            .key(&dk)
            .key(OWNER)
            .arg(name)
            .arg(FOLLOWER_ENTRY_TTL.as_millis() as u64)
            .arg(room)
            .arg(caps.per_client)
            .arg(caps.per_debate)
            .arg(format!("{ck}\n{dk}"))
            .invoke_async(&mut self.conn())
            .await?;
        Ok(match answer.as_str() {
            "ok" => Reservation::Granted,
            "client" => Reservation::Refused("client"),
            "debate" => Reservation::Refused("debate"),
            _ => Reservation::Refused("total"),
        })
    }

    /// Gives back the place of a follower whose consumer was not created.
    pub async fn release_follower(&self, name: &str, identity: &str, debate: &str) -> Result<()> {
        let script = RELEASE.get_or_init(|| Script::new(RELEASE_SCRIPT));
        let _: i64 = script
            .key(ALL)
            .key(client_key(identity))
            .key(debate_key(debate))
            .key(OWNER)
            .arg(name)
            .invoke_async(&mut self.conn())
            .await?;
        Ok(())
    }

    /// Brings the registry in line with the follower consumers that exist (`live`: every
    /// follower name the events stream lists, complete): their entries are extended, the
    /// others' removed unless reserved within [`REFRESH_GRACE`]. Returns the entries kept.
    pub async fn refresh_followers(&self, live: &[String]) -> Result<usize> {
        let script = REFRESH.get_or_init(|| Script::new(REFRESH_SCRIPT));
        let mut invocation = script.prepare_invoke();
        invocation
            .key(ALL)
            .key(OWNER)
            .arg(FOLLOWER_ENTRY_TTL.as_millis() as u64)
            .arg(REFRESH_GRACE.as_millis() as u64);
        for name in live {
            invocation.arg(name);
        }
        Ok(invocation.invoke_async(&mut self.conn()).await?)
    }

    /// Followers in the registry (expired entries aside), in all and for `identity`.
    pub async fn followers_held(&self, identity: &str) -> Result<(usize, usize)> {
        let now = self.redis_now_ms().await?;
        let mut conn = self.conn();
        let all: usize = redis::cmd("ZCOUNT")
            .arg(ALL)
            .arg(now)
            .arg("+inf")
            .query_async(&mut conn)
            .await?;
        let mine: usize = redis::cmd("ZCOUNT")
            .arg(client_key(identity))
            .arg(now)
            .arg("+inf")
            .query_async(&mut conn)
            .await?;
        Ok((all, mine))
    }
}
