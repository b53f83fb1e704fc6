//! Which rounds a transition changed: a revision per round, so the checkpoint writer can
//! leave the rounds that did not change unread ([`Machine::round_revisions`]).
//!
//! Every change of a round goes through [`Machine::round_mut`] (or adds a round, or
//! touches them all); each moves the round's revision to the next tick of a clock that
//! only this machine advances. The clock belongs to one instance: a clone, or a machine
//! rebuilt from a checkpoint, starts a new one, so revisions of two instances are never
//! compared (the writer checks `instance`). After every input the revisions are matched
//! to the rounds' number, and in debug builds each round whose revision did not move is
//! checked to be what it was before the input: a change made past `round_mut` fails
//! every test that makes it.

use std::sync::atomic::{AtomicU64, Ordering};

use parley_protocol::{DebateRound, RoundRevisions};

use super::Machine;

/// Instance numbers, unique in the process.
static INSTANCES: AtomicU64 = AtomicU64::new(1);

#[derive(Debug)]
pub(super) struct Revisions {
    instance: u64,
    clock: u64,
    revs: Vec<u64>,
}

impl Revisions {
    pub(super) fn new(rounds: usize) -> Self {
        let mut r = Self {
            instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
            clock: 0,
            revs: Vec::new(),
        };
        r.touch_all(rounds);
        r
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Round index `i` changed (or was added).
    pub(super) fn touch(&mut self, i: usize) {
        let t = self.tick();
        if i >= self.revs.len() {
            self.revs.resize(i + 1, t);
        }
        self.revs[i] = t;
    }

    /// Every round may have changed; there are `rounds` of them.
    pub(super) fn touch_all(&mut self, rounds: usize) {
        let t = self.tick();
        self.revs.clear();
        self.revs.resize(rounds, t);
    }

    /// After an input: the revisions match the rounds' number (rounds added or removed
    /// past [`Machine::round_mut`] make every round count as changed).
    pub(super) fn settle(&mut self, rounds: usize) {
        if self.revs.len() != rounds {
            self.touch_all(rounds);
        }
    }
}

/// A clone is another instance: its changes are its own.
impl Clone for Revisions {
    fn clone(&self) -> Self {
        Self::new(self.revs.len())
    }
}

/// The rounds as they were before an input, for the debug check that a round whose
/// revision did not move is unchanged.
#[cfg(debug_assertions)]
pub(super) struct Before {
    revs: Vec<u64>,
    rounds: Vec<String>,
}

impl Machine {
    /// The revision of each round (see the module docs).
    pub fn round_revisions(&self) -> RoundRevisions<'_> {
        RoundRevisions {
            instance: self.revisions.instance,
            revs: &self.revisions.revs,
        }
    }

    /// Round `r` (1-based) to change: its revision moves.
    pub(super) fn round_mut(&mut self, r: u32) -> Option<&mut DebateRound> {
        let i = r.checked_sub(1)? as usize;
        if i < self.state.rounds.len() {
            self.revisions.touch(i);
        }
        self.state.rounds.get_mut(i)
    }

    /// A new last round.
    pub(super) fn push_round(&mut self, round: DebateRound) {
        self.state.rounds.push(round);
        self.revisions.touch(self.state.rounds.len() - 1);
    }

    /// Every round, to change.
    pub(super) fn rounds_mut(&mut self) -> &mut [DebateRound] {
        self.revisions.touch_all(self.state.rounds.len());
        &mut self.state.rounds
    }

    #[cfg(debug_assertions)]
    pub(super) fn rounds_before(&self) -> Before {
        Before {
            revs: self.revisions.revs.clone(),
            rounds: self.state.rounds.iter().map(round_json).collect(),
        }
    }

    /// Matches the revisions to the rounds after an input (and, in debug builds, checks
    /// that every round whose revision did not move is as it was in `before`).
    pub(super) fn settle_revisions(&mut self, #[cfg(debug_assertions)] before: Before) {
        self.revisions.settle(self.state.rounds.len());
        #[cfg(debug_assertions)]
        for (i, rd) in self.state.rounds.iter().enumerate() {
            if before.revs.get(i) == Some(&self.revisions.revs[i]) {
                assert_eq!(
                    before.rounds.get(i),
                    Some(&round_json(rd)),
                    "round {} changed past Machine::round_mut (its revision did not move)",
                    i + 1
                );
            }
        }
    }
}

#[cfg(debug_assertions)]
fn round_json(rd: &DebateRound) -> String {
    serde_json::to_string(rd).unwrap_or_default()
}
