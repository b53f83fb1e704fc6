//! Deltas made and applied, their packing, and the elements a caller gives as known.

use super::*;
use serde_json::json;

fn roundtrip(a: Value, b: Value) -> Delta {
    let s = Shaper::new();
    let (old, _) = s.shape(&a);
    let (d, _, _) = s.diff(&old, &b);
    let mut doc = a.clone();
    apply(&mut doc, &d.json).unwrap_or_else(|e| panic!("{e}: {}", d.json));
    assert_eq!(doc, b, "delta {}", d.json);
    d
}

fn long(s: &str) -> String {
    s.repeat(150)
}

#[test]
fn typed_maps_with_number_keys_diff_and_apply() {
    use std::collections::BTreeMap;
    let s = Shaper::new();
    let map = |n: u32| -> BTreeMap<u32, String> {
        (0..n).map(|k| (k * 7, long(&k.to_string()))).collect()
    };
    for (a, b) in [(map(3), map(5)), (map(5), map(2)), (map(4), map(4))] {
        let (old, _) = s.shape_of(&a).unwrap();
        let (d, _, _) = s.diff_of(&old, &b).unwrap();
        let mut doc = serde_json::to_value(&a).unwrap();
        apply(&mut doc, &d.json).unwrap_or_else(|e| panic!("{e}: {}", d.json));
        assert_eq!(doc, serde_json::to_value(&b).unwrap(), "delta {}", d.json);
    }
}

/// Elements given as known are not read, keep their shape (a later change in place is
/// still a small edit), and the deltas are those of a writer that read them.
#[test]
fn known_elements_are_not_read_and_keep_their_shape() {
    let s = Shaper::new();
    let round = |n: u32, k: usize| json!({"n": n, "cs": (0..k).map(|i| long(&format!("{n}.{i}"))).collect::<Vec<_>>()});
    let doc = |rs: Vec<Value>| json!({"rounds": rs, "status": "running"});
    let a = doc(vec![round(1, 3), round(2, 2)]);
    let b = doc(vec![round(1, 3), round(2, 3)]);
    let c = doc(vec![round(1, 4), round(2, 3)]);
    let first = s.shape_with(&a, "rounds").unwrap();
    let elems = first.elems.clone().unwrap();
    assert_eq!(elems.len(), 2);
    // b: round 1 known unchanged, round 2 not.
    let known = Known {
        field: "rounds",
        elems: vec![Some(elems[0]), None],
    };
    let with = s.diff_with(&first.shape, &b, Some(known)).unwrap();
    let plain = s.diff_with(&first.shape, &b, None).unwrap();
    assert_eq!(with.unread, 1);
    assert_eq!(plain.unread, 0);
    assert_eq!(with.delta.json, plain.delta.json);
    assert_eq!(with.shape.hash(), plain.shape.hash());
    assert_eq!(with.elems, s.shape_with(&b, "rounds").unwrap().elems);
    // c: round 1 grew. Its shape was kept whole though it was not read: an append.
    let (d, _, _) = s.diff_of(&with.shape, &c).unwrap();
    let (e, _, _) = s.diff_of(&plain.shape, &c).unwrap();
    assert_eq!(d.json, e.json);
    assert!(
        d.json.starts_with(r#"{"rounds":{"0":{"cs":["a",3,"#),
        "{}",
        d.json
    );
    let mut back = b.clone();
    apply(&mut back, &d.json).unwrap();
    assert_eq!(back, c);
}

/// An element given as known that changed fails in a debug build.
#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "given as unchanged but changed")]
fn a_known_element_that_changed_fails_in_debug_builds() {
    let s = Shaper::new();
    let a = json!({"rounds": [long("a"), long("b"), long("c")]});
    let b = json!({"rounds": [long("x"), long("b"), long("c")]});
    let first = s.shape_with(&a, "rounds").unwrap();
    let elems = first.elems.unwrap().into_iter().map(Some).collect();
    let _ = s.diff_with(
        &first.shape,
        &b,
        Some(Known {
            field: "rounds",
            elems,
        }),
    );
}

#[test]
fn appends_are_appends() {
    let a = json!({"rounds": [{"n": 1, "cs": [long("a"), long("b")]}], "status": "running"});
    let b =
        json!({"rounds": [{"n": 1, "cs": [long("a"), long("b"), long("c")]}], "status": "running"});
    let d = roundtrip(a.clone(), b);
    assert!(
        d.json.starts_with(r#"{"rounds":{"0":{"cs":["a",2,["ccc"#),
        "{}",
        d.json
    );
    // Appended objects are edits of the element before them.
    let ev = |seq: u32, task: &str| json!({"debateId": long("d"), "seq": seq, "taskId": task, "type": "taskDispatched"});
    let e = json!({"outbox": [ev(1, "t1")]});
    let f = json!({"outbox": [ev(1, "t1"), ev(2, "t2"), ev(3, "t3"), ev(3, "t3")]});
    let d = roundtrip(e, f);
    assert_eq!(
        d.json,
        r#"{"outbox":["a",1,[{"seq":2,"taskId":"t2"},{"seq":3,"taskId":"t3"},{}]]}"#
    );
    assert!(!d.json.contains(&long("a")), "{}", d.json);
    assert_eq!(roundtrip(a.clone(), a).json, "{}");
}

#[test]
fn sets_removes_truncates_splices_and_type_changes() {
    let big = json!({"x": long("x"), "y": [long("1"), long("2"), long("3")], "z": {"deep": long("d"), "n": 1}});
    let mut b = big.clone();
    b["z"]["n"] = json!(2);
    b["new"] = json!("v");
    b["obj"] = json!({"o": [1]});
    b.as_object_mut().unwrap().remove("x");
    b["y"] = json!([long("1")]);
    let d = roundtrip(big.clone(), b);
    assert!(d.json.starts_with(r#"["-",["x"],{"#), "{}", d.json);
    // The form written before shapes kept key names: the keys kept.
    let mut k = big.clone();
    apply(&mut k, r#"["k",["y","z"],{"new":"v"}]"#).unwrap();
    assert_eq!(k, json!({"y": big["y"], "z": big["z"], "new": "v"}));
    // A removal of a key that is not there fails.
    assert!(apply(&mut k, r#"["-",["x"],{}]"#).is_err());
    assert!(d.json.contains(r#""y":["t",1]"#), "{}", d.json);
    assert!(d.json.contains(r#""z":{"n":2}"#), "{}", d.json);
    assert!(d.json.contains(r#""obj":["s",{"o":[1]}]"#), "{}", d.json);
    // An earlier array element changed (it is a leaf once pruned): rewritten whole.
    let mut c = big.clone();
    c["y"][0] = json!("changed");
    assert!(roundtrip(big.clone(), c).json.contains(r#""0":"changed""#));
    // Inserted in the middle, removed from the middle: a splice of the new elements.
    let mut f = big.clone();
    f["y"] = json!([long("1"), long("new"), long("2"), long("3")]);
    let d = roundtrip(big.clone(), f.clone());
    assert!(d.json.contains(r#""y":["x",3,1,0,["#), "{}", d.json);
    assert!(!d.json.contains(&long("3")), "{}", d.json);
    roundtrip(f, big.clone());
    // Changed in place and grown.
    let mut g = big.clone();
    g["y"] = json!([long("1"), long("2"), "three", long("4")]);
    let d = roundtrip(big.clone(), g);
    assert!(
        d.json.contains(r#"["m",{"2":"three"},["a",3,["#),
        "{}",
        d.json
    );
    // Type changes and a whole new document.
    let mut e = big.clone();
    e["z"] = json!([1, 2]);
    roundtrip(big.clone(), e);
    roundtrip(big.clone(), json!(null));
    roundtrip(json!([1, 2, 3]), json!({"a": 1}));
    roundtrip(json!({"a": long("a")}), json!([long("a")]));
}

#[test]
fn packed_deltas_unpack_against_the_same_dict_only() {
    let prev = r#"{"engine":{"eventSeq":51,"outbox":{"0":{"agentId":"a2","seq":51,"taskId":"deb/1/critique/a2/a0"}}},"updatedAt":"2026-01-02T03:04:05.333Z"}"#;
    let next = r#"{"engine":{"eventSeq":52,"outbox":{"0":{"agentId":"a3","seq":52,"taskId":"deb/1/critique/a3/a0"}}},"updatedAt":"2026-01-02T03:04:05.370Z"}"#;
    let dict = dict_of(prev.as_bytes());
    let packed = pack(next, dict);
    assert_eq!(packed[0], PACKED);
    assert!(
        packed.len() < next.len() / 2,
        "{} of {}",
        packed.len(),
        next.len()
    );
    assert_eq!(unpack(&packed, dict).unwrap(), next);
    // Against another dict, cut short, altered or too long: an error or another text,
    // never a panic (the link chain catches a different text).
    assert_ne!(unpack(&packed, b"").ok().as_deref(), Some(next));
    assert!(unpack(&packed[..3], dict).is_err());
    assert!(unpack(&packed[..packed.len() - 2], dict).is_err());
    let mut long = packed.clone();
    long[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        unpack(&long, dict).unwrap_err(),
        UnpackError::TooLarge(_)
    ));
    let mut wrong = packed.clone();
    wrong[1..5].copy_from_slice(&(next.len() as u32 + 1).to_le_bytes());
    assert!(unpack(&wrong, dict).is_err());
    // Short or unpackable deltas stay JSON, which reads as itself.
    assert_eq!(pack("{}", dict), b"{}");
    assert_eq!(unpack(b"{}", dict).unwrap(), "{}");
    let big = "x".repeat(DICT_BYTES * 3);
    assert_eq!(dict_of(big.as_bytes()).len(), DICT_BYTES);
}

#[test]
fn a_delta_on_the_wrong_base_fails() {
    let s = Shaper::new();
    let a = json!({"cs": [long("a")], "k": long("k")});
    let b = json!({"cs": [long("a"), long("b")], "k": long("k")});
    let (old, _) = s.shape(&a);
    let (d, _, _) = s.diff(&old, &b);
    // Applied twice: the array no longer has the length the append expects.
    let mut doc = a.clone();
    apply(&mut doc, &d.json).unwrap();
    let e = apply(&mut doc, &d.json).unwrap_err();
    assert!(
        e.reason.contains("made for 1 elements") && e.path == "/cs",
        "{e}"
    );
    // A member that is not there, or not an array.
    assert!(apply(&mut json!({"k": 1}), &d.json).is_err());
    assert!(apply(&mut json!({"cs": 1}), &d.json).is_err());
    assert!(apply(&mut json!({"cs": [1]}), r#"{"cs":{"4":2}}"#).is_err());
    assert!(apply(&mut json!({"cs": [1]}), r#"{"new":{"deep":2}}"#).is_err());
    // Garbage.
    assert!(apply(&mut json!({}), r#"[["s""#).is_err());
    assert!(apply(&mut json!({}), r#"["q",1]"#).is_err());
    assert!(apply(&mut json!([]), r#"["x",0,0,1,[]]"#).is_err());
}
