//! Round revisions: which rounds an input changed (what the checkpoint writer trusts).

use super::*;

/// Through a whole debate, a round's revision moves exactly when the round changed, and a
/// round that changed always has a new revision.
#[test]
fn a_round_revision_moves_when_and_only_when_the_round_changes() {
    let mut r = Run::new(spec(3, 3, "fixed", json!({})));
    let instance = r.machine.round_revisions().instance;
    let mut before: (Vec<u64>, Vec<String>) = (vec![], vec![]);
    let (mut moved, mut kept) = (0, 0);
    r.apply(Input::Start);
    while let Some(t) = r.queue.pop_front() {
        let revs = r.machine.round_revisions().revs.to_vec();
        let rounds: Vec<String> = r
            .machine
            .state()
            .rounds
            .iter()
            .map(|rd| serde_json::to_string(rd).unwrap())
            .collect();
        assert_eq!(revs.len(), rounds.len(), "a revision per round");
        for (i, rev) in revs.iter().enumerate() {
            match (before.0.get(i), before.1.get(i)) {
                (Some(old_rev), Some(old)) if old_rev == rev => {
                    assert_eq!(
                        old,
                        &rounds[i],
                        "round {} changed, its revision did not",
                        i + 1
                    );
                    kept += 1;
                }
                (Some(_), Some(_)) => moved += 1,
                _ => {}
            }
        }
        before = (revs, rounds);
        r.apply(Input::Result(ok(&t, &format!("text of {}", t.id))));
    }
    assert_eq!(r.machine.state().status, DebateStatus::Completed);
    assert!(moved > 0 && kept > 0, "moved {moved}, kept {kept}");
    assert_eq!(r.machine.round_revisions().instance, instance);
}

#[test]
fn a_copy_or_a_rebuilt_machine_counts_revisions_of_its_own() {
    let r = Run::run_ok(spec(2, 2, "fixed", json!({})));
    let copy = r.machine.clone();
    let rebuilt = Machine::from_checkpoint(r.machine.spec().clone(), r.machine.state().clone());
    let own = r.machine.round_revisions().instance;
    assert_ne!(copy.round_revisions().instance, own);
    assert_ne!(rebuilt.round_revisions().instance, own);
    assert_ne!(
        rebuilt.round_revisions().instance,
        copy.round_revisions().instance
    );
    assert_eq!(rebuilt.round_revisions().revs.len(), 2);
}

/// A round changed past `Machine::round_mut` fails the input in a debug build (every
/// test of the engine checks the revisions so).
#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "changed past Machine::round_mut")]
fn a_round_changed_behind_the_revisions_back_fails_in_debug_builds() {
    let mut r = Run::new(spec(2, 2, "fixed", json!({})));
    r.apply(Input::Start);
    let t = r.queue.pop_front().unwrap();
    r.apply(Input::Result(ok(&t, "x")));
    let before = r.machine.rounds_before();
    r.machine.state.rounds[0].contributions[0].content = "forged".into();
    r.machine.settle_revisions(before);
}
