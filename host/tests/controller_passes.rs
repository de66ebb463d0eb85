//! The engine's decisions about controllers' passes against a real store, without processes:
//! launches within the global and per-controller limits and never two of one resource, the
//! envelope a pass child gets (its token fences its requests), a pass past its deadline
//! stopped and recorded, a child that exits unfinished recorded as an error, a disabled
//! controller's pass stopped without an error.
mod common;

use common::*;
use piw_host::engine::children::SupervisorCmd;
use piw_host::engine::controllers::{self, PassReport, PassSettings};
use piw_host::engine::state::HostState;
use piw_host::engine::store::controllers::*;
use piw_host::protocol::RequestKind;
use piw_host::store::*;
use serde_json::{json, Value};

const PROJECT: &str = "/work/project";
const DEADLINE_MS: i64 = 10_000;

fn host(f: &mut Fixture) -> HostState {
    let epoch = f.store.write(|w| w.begin_host_epoch(1)).unwrap();
    let mut state = HostState::new(Box::new(piw_host::ids::OsIds));
    state.epoch = epoch;
    state.supervising = true;
    state.child_config.controllers = Some(PassSettings {
        runtime: Ok(("/opt/node".into(), "/opt/piw/lib".into())),
        env: Vec::new(),
        logs: None,
        max_passes: 3,
        max_per_controller: 2,
    });
    state
}

fn register(f: &mut Fixture, name: &str) {
    f.store
        .write(|w| {
            w.register_controller(&ControllerRegistration {
                project_dir: PROJECT.into(),
                name: name.into(),
                source_path: format!("{PROJECT}/.pi/controllers/{name}.controller.mjs"),
                source_hash: "h".into(),
                pass_deadline_ms: DEADLINE_MS,
            })?;
            w.set_controller_enabled(PROJECT, name, true)
        })
        .unwrap();
}

fn apply(f: &mut Fixture, controller: &str, key: &str) -> String {
    f.store
        .write(|w| w.apply_resource(PROJECT, controller, key, &json!({ "k": key }), None))
        .unwrap()
        .1
        .uid
}

/// The launches and stops ordered since the last call: (uid, envelope) and launch numbers.
fn orders(state: &mut HostState) -> (Vec<(String, Value)>, Vec<u64>) {
    let mut launches = Vec::new();
    let mut stops = Vec::new();
    for cmd in state.child_commands.drain(..) {
        match cmd {
            SupervisorCmd::LaunchPass {
                resource_uid, spec, ..
            } => {
                assert_eq!(spec.program, std::path::PathBuf::from("/opt/node"));
                assert_eq!(spec.args, ["/opt/piw/lib/controllers/child.js"]);
                assert_eq!(spec.cwd, std::path::PathBuf::from(PROJECT));
                launches.push((
                    resource_uid,
                    serde_json::from_slice(&spec.stdin_payload).unwrap(),
                ));
            }
            SupervisorCmd::StopPass { launch, .. } => stops.push(launch),
            other => panic!("unexpected order {other:?}"),
        }
    }
    (launches, stops)
}

fn controller_of(envelope: &Value) -> String {
    envelope["controller"].as_str().unwrap().to_owned()
}

fn fence_of(envelope: &Value) -> PassFence {
    PassFence {
        resource_uid: envelope["resource_uid"].as_str().unwrap().into(),
        pass_id: envelope["pass_id"].as_str().unwrap().into(),
        token: piw_host::ids::ClaimToken::from_secret(envelope["token"].as_str().unwrap().into()),
    }
}

#[test]
fn passes_launch_within_the_limits_and_never_twice_for_one_resource() {
    let mut f = Fixture::new();
    let mut state = host(&mut f);
    register(&mut f, "alpha");
    register(&mut f, "beta");
    // Applied one after another: due in this order.
    let applied = |f: &mut Fixture, c: &str, k: String| {
        f.clock.advance(1);
        apply(f, c, &k)
    };
    let alphas: Vec<_> = (0..3)
        .map(|i| applied(&mut f, "alpha", format!("a{i}")))
        .collect();
    let betas: Vec<_> = (0..2)
        .map(|i| applied(&mut f, "beta", format!("b{i}")))
        .collect();
    let now = f.store.now_ms();

    controllers::reconcile(&mut f.store, &mut state, now);
    let (launched, _) = orders(&mut state);
    let by = |c: &str| {
        launched
            .iter()
            .filter(|(_, e)| controller_of(e) == c)
            .count()
    };
    assert_eq!(
        (launched.len(), by("alpha"), by("beta")),
        (3, 2, 1),
        "{launched:?}"
    );
    // The envelope: the resource as read, the deadline, the controller's file.
    let (uid, envelope) = &launched[0];
    assert_eq!(envelope["resource"]["uid"], json!(uid));
    assert_eq!(envelope["deadline_ms"], json!(DEADLINE_MS));
    assert_eq!(envelope["project_dir"], json!(PROJECT));
    assert!(envelope["source_path"]
        .as_str()
        .unwrap()
        .ends_with(".controller.mjs"));

    // Nothing more while they run, even when asked: a running resource gets no second pass.
    for uid in launched.iter().map(|(u, _)| u) {
        let key = f.store.resource_by_uid(uid).unwrap().unwrap().key;
        let controller = f.store.resource_by_uid(uid).unwrap().unwrap().controller;
        f.store
            .write(|w| w.reconcile_resource(PROJECT, &controller, &key, "poke"))
            .unwrap();
    }
    controllers::note_requests(&mut state, [RequestKind::ResourceReconcile]);
    controllers::reconcile(&mut f.store, &mut state, now);
    assert_eq!(orders(&mut state).0.len(), 0);

    // One finishes (settled, but poked meanwhile: another pass follows) and its child exits:
    // the freed slot goes to the next due resource, which may be the same one.
    let (first_uid, first) = launched
        .iter()
        .find(|(_, e)| controller_of(e) == "beta")
        .unwrap()
        .clone();
    f.store
        .write(|w| {
            w.finish_pass(
                &fence_of(&first),
                &PassResult {
                    kind: PassResultKind::Settled,
                    after_ms: None,
                    message: None,
                    status: Some(json!({})),
                    finalizers: None,
                },
            )
        })
        .unwrap();
    let launch = state.controllers.live[&first_uid].launch;
    controllers::on_reports(
        &mut f.store,
        &mut state,
        now,
        vec![PassReport::Exited {
            resource_uid: first_uid.clone(),
            launch,
            exit: ChildExitRecord {
                exit_code: Some(0),
                reason: "exited with code 0".into(),
                ..Default::default()
            },
        }],
    );
    controllers::reconcile(&mut f.store, &mut state, now);
    let (next, _) = orders(&mut state);
    assert_eq!(next.len(), 1);
    assert_eq!(controller_of(&next[0].1), "beta", "alpha is at its limit");
    assert!(betas.contains(&next[0].0));
    assert!(alphas
        .iter()
        .all(|a| f.store.queue_entry(a).unwrap().is_some()));
    let outcomes: Vec<_> = f
        .store
        .controller_passes(&first_uid)
        .unwrap()
        .into_iter()
        .map(|p| p.outcome)
        .collect();
    assert_eq!(
        outcomes,
        vec![PassOutcome::Settled],
        "a clean exit after finishing adds nothing"
    );
}

#[test]
fn an_overdue_pass_is_stopped_an_unfinished_exit_is_an_error_and_disabling_interrupts() {
    let mut f = Fixture::new();
    let mut state = host(&mut f);
    register(&mut f, "alpha");
    register(&mut f, "beta");
    let a = apply(&mut f, "alpha", "a");
    let b = apply(&mut f, "beta", "b");
    let now = T0;
    controllers::reconcile(&mut f.store, &mut state, now);
    assert_eq!(orders(&mut state).0.len(), 2);
    assert_eq!(
        controllers::next_deadline(&state, now),
        Some(T0 + DEADLINE_MS)
    );

    // beta's child dies on its own: an error, with backoff.
    let launch_b = state.controllers.live[&b].launch;
    controllers::on_reports(
        &mut f.store,
        &mut state,
        now,
        vec![PassReport::Exited {
            resource_uid: b.clone(),
            launch: launch_b,
            exit: ChildExitRecord {
                signal: Some(9),
                reason: "exited by signal 9".into(),
                stderr_tail: b"boom\n".to_vec(),
                ..Default::default()
            },
        }],
    );
    let pass = f.store.controller_passes(&b).unwrap().pop().unwrap();
    assert_eq!(pass.outcome, PassOutcome::Error);
    assert_eq!(
        pass.message.as_deref(),
        Some("the pass's child exited by signal 9 before it finished: boom")
    );
    let q = f.store.queue_entry(&b).unwrap().unwrap();
    assert_eq!(q.consecutive_errors, 1);
    assert!(q.due_at > T0, "backed off");

    // alpha's pass runs past its deadline: stopped and recorded.
    let now = T0 + DEADLINE_MS;
    controllers::reconcile(&mut f.store, &mut state, now);
    let (launched, stopped) = orders(&mut state);
    assert_eq!(stopped, vec![state.controllers.live[&a].launch]);
    let relaunched: Vec<_> = launched.iter().map(|(u, _)| u.clone()).collect();
    assert_eq!(
        relaunched,
        vec![b.clone()],
        "beta after its backoff; alpha not while its child lives"
    );
    assert_eq!(
        f.store
            .controller_passes(&a)
            .unwrap()
            .pop()
            .unwrap()
            .outcome,
        PassOutcome::Deadline
    );
    // Due again after its backoff, but its killed child has not exited yet: not launched.
    let now = T0 + DEADLINE_MS + 1_000;
    assert!(f
        .store
        .due_resources(now, 10)
        .unwrap()
        .iter()
        .any(|q| q.resource_uid == a));
    controllers::note_requests(&mut state, [RequestKind::ResourceReconcile]);
    controllers::reconcile(&mut f.store, &mut state, now);
    assert_eq!(
        orders(&mut state).0.len(),
        0,
        "never two children of one resource"
    );
    // Its exit (the host stopped it) adds no record; then its next pass starts.
    let launch_a = state.controllers.live[&a].launch;
    controllers::on_reports(
        &mut f.store,
        &mut state,
        now,
        vec![PassReport::Exited {
            resource_uid: a.clone(),
            launch: launch_a,
            exit: ChildExitRecord {
                reason: "stopped by the host by signal 15".into(),
                ..Default::default()
            },
        }],
    );
    assert_eq!(f.store.controller_passes(&a).unwrap().len(), 1);
    controllers::reconcile(&mut f.store, &mut state, now);
    let (launched, _) = orders(&mut state);
    assert_eq!(
        launched.iter().map(|(u, _)| u.clone()).collect::<Vec<_>>(),
        vec![a.clone()]
    );

    // beta disabled while its pass runs: stopped, interrupted.
    f.store
        .write(|w| w.set_controller_enabled(PROJECT, "beta", false))
        .unwrap();
    controllers::note_requests(&mut state, [RequestKind::ControllerDisable]);
    controllers::reconcile(&mut f.store, &mut state, now);
    let (launched, stopped) = orders(&mut state);
    assert_eq!((launched.len(), stopped.len()), (0, 1));
    assert_eq!(
        f.store
            .controller_passes(&b)
            .unwrap()
            .pop()
            .unwrap()
            .outcome,
        PassOutcome::Interrupted
    );
    let q = f.store.queue_entry(&b).unwrap().unwrap();
    assert_eq!(
        (q.pass, q.consecutive_errors),
        (None, 1),
        "no error counted"
    );
    assert_eq!(
        f.store.due_resources(now, 10).unwrap().len(),
        0,
        "beta is off"
    );
}
