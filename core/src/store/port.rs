//! The engine's store interface (`piw_engine::store::{Storage, Transaction}`) over SQLite:
//! each method is the `Store` or `WriteTx` method of the same name.

use piw_engine::store::port::{Storage, Transaction, TxBody};
use serde_json::Value;

use super::*;

impl Storage for Store {
    fn write_dyn(&mut self, now: UnixMillis, body: TxBody<'_, ()>) -> StoreResult<()> {
        Store::write_at(self, now, |w| body(w))
    }

    fn lease_ms(&self) -> i64 {
        self.config.lease_ms
    }

    fn attempts_page(
        &self,
        run_id: &str,
        before: Option<&str>,
        limit: u32,
    ) -> StoreResult<(Vec<AttemptRecord>, u64)> {
        Store::attempts_page(self, run_id, before, limit)
    }

    fn claim_info(&self, run_id: &str) -> StoreResult<ClaimInfo> {
        Store::claim_info(self, run_id)
    }

    fn commits(&self) -> u64 {
        Store::commits(self)
    }

    fn count_by_status(&self) -> StoreResult<Vec<(RunStatus, u64)>> {
        Store::count_by_status(self)
    }

    fn count_prunable(&self, selector: &PruneSelector) -> StoreResult<u64> {
        Store::count_prunable(self, selector)
    }

    fn decisions(&self, run_id: &str) -> StoreResult<Vec<DecisionRecord>> {
        Store::decisions(self, run_id)
    }

    fn detached_steps(&self) -> StoreResult<Vec<DetachedStep>> {
        Store::detached_steps(self)
    }

    fn diagnose(&self) -> StoreResult<Vec<Finding>> {
        Store::diagnose(self)
    }

    fn effects(&self, run_id: &str) -> StoreResult<Vec<EffectRecord>> {
        Store::effects(self, run_id)
    }

    fn events(&self, run_id: &str, after_seq: u64) -> StoreResult<Vec<EventRecord>> {
        Store::events(self, run_id, after_seq)
    }

    fn events_dropped(&self, run_id: &str) -> StoreResult<u64> {
        Store::events_dropped(self, run_id)
    }

    fn interactions(
        &self,
        run_id: Option<&str>,
        session: Option<&str>,
    ) -> StoreResult<Vec<InteractionRecord>> {
        Store::interactions(self, run_id, session)
    }

    fn last_child(&self, run_id: &str) -> StoreResult<Option<ChildRecord>> {
        Store::last_child(self, run_id)
    }

    fn list_runs_after(
        &self,
        session: Option<&str>,
        unfinished_only: bool,
        statuses: &[RunStatus],
        id_prefix: Option<&str>,
        after: Option<&RunListKey>,
        limit: u32,
    ) -> StoreResult<Vec<RunRecord>> {
        Store::list_runs_after(
            self,
            session,
            unfinished_only,
            statuses,
            id_prefix,
            after,
            limit,
        )
    }

    fn newest_messages(&self, run_id: &str, limit: u32) -> StoreResult<(Vec<MessageRecord>, u64)> {
        Store::newest_messages(self, run_id, limit)
    }

    fn next_deadline(&self) -> StoreResult<Option<UnixMillis>> {
        Store::next_deadline(self)
    }

    fn next_delayed_ready(&self) -> StoreResult<Option<UnixMillis>> {
        Store::next_delayed_ready(self)
    }

    fn next_node_deadline(&self, owner_id: &str) -> StoreResult<Option<UnixMillis>> {
        Store::next_node_deadline(self, owner_id)
    }

    fn cursor_key(&self) -> crate::protocol::payload::CursorKey {
        Store::cursor_key(self)
    }

    fn disk_full_retry_at(&self) -> Option<UnixMillis> {
        Store::disk_full_retry_at(self)
    }

    fn open_attempt_deadline(&self, run_id: &str) -> StoreResult<Option<UnixMillis>> {
        Store::open_attempt_deadline(self, run_id)
    }

    fn prunable_runs(
        &self,
        selector: &PruneSelector,
        after: Option<&RunListKey>,
        limit: usize,
    ) -> StoreResult<PrunablePage> {
        Store::prunable_runs(self, selector, after, limit)
    }

    fn prune_runs(&mut self, run_ids: &[String]) -> StoreResult<Vec<String>> {
        Store::prune_runs(self, run_ids)
    }

    fn read_value_chunk(
        &self,
        run_id: &str,
        sha256: &str,
        offset: u64,
        max: usize,
    ) -> StoreResult<ValueChunk> {
        Store::read_value_chunk(self, run_id, sha256, offset, max)
    }

    fn ready_runs(&self, now: UnixMillis, limit: u32) -> StoreResult<Vec<String>> {
        Store::ready_runs(self, now, limit)
    }

    fn run(&self, run_id: &str) -> StoreResult<RunRecord> {
        Store::run(self, run_id)
    }

    fn run_payload(&self, run_id: &str) -> StoreResult<(Value, Option<Value>, Value)> {
        Store::run_payload(self, run_id)
    }

    fn run_state(&self, run_id: &str) -> StoreResult<(RunStatus, u64)> {
        Store::run_state(self, run_id)
    }

    fn run_view(&self, run_id: &str) -> StoreResult<Option<RunView>> {
        Store::run_view(self, run_id)
    }

    fn updates(&self, run_id: &str) -> StoreResult<Vec<UpdateRecord>> {
        Store::updates(self, run_id)
    }
}

impl Transaction for WriteTx<'_> {
    fn savepoint_dyn(&mut self, body: TxBody<'_, ()>) -> StoreResult<()> {
        WriteTx::savepoint(self, |w| body(w))
    }

    fn command_dyn(
        &mut self,
        meta: &CommandMeta,
        body: TxBody<'_, Value>,
    ) -> StoreResult<CommandOutcome> {
        WriteTx::command(self, meta, |w| body(w))
    }

    fn command_group_dyn(
        &mut self,
        count: usize,
        meta_of: &mut dyn FnMut(usize) -> StoreResult<CommandMeta>,
        apply: &mut dyn FnMut(&mut dyn Transaction, usize) -> StoreResult<Value>,
    ) -> StoreResult<Vec<StoreResult<CommandOutcome>>> {
        let items: Vec<usize> = (0..count).collect();
        WriteTx::command_group(self, &items, |i| meta_of(*i), |w, i| apply(w, *i))
    }

    fn ack_message(&mut self, message_id: &str) -> StoreResult<UnixMillis> {
        WriteTx::ack_message(self, message_id)
    }

    fn activate(&mut self, run_id: &str, owner_id: &str) -> StoreResult<Activation> {
        WriteTx::activate(self, run_id, owner_id)
    }

    fn answer_decision_via(
        &mut self,
        decision_id: &str,
        answer: &Value,
        answered_by: Answerer,
        channel: Option<&str>,
    ) -> StoreResult<()> {
        WriteTx::answer_decision_via(self, decision_id, answer, answered_by, channel)
    }

    fn answer_for_attempt(&self, attempt_id: &str) -> StoreResult<Option<Value>> {
        WriteTx::answer_for_attempt(self, attempt_id)
    }

    fn attempt_deadline(&self, attempt_id: &str) -> StoreResult<Option<UnixMillis>> {
        WriteTx::attempt_deadline(self, attempt_id)
    }

    fn cancel(
        &mut self,
        run_id: &str,
        fence: Fence<'_>,
        reason: &str,
    ) -> StoreResult<CancelSummary> {
        WriteTx::cancel(self, run_id, fence, reason)
    }

    fn child_losses(&self, run_id: &str) -> StoreResult<u32> {
        WriteTx::child_losses(self, run_id)
    }

    fn child_lost(&mut self, claim: &Claim, reason: &str) -> StoreResult<RecoveredRun> {
        WriteTx::child_lost(self, claim, reason)
    }

    fn claim_messages(
        &mut self,
        session: &str,
        owner: &str,
        after: Option<&str>,
        limit: u32,
        lease_ms: i64,
        max_bytes: usize,
    ) -> StoreResult<ClaimedMessages> {
        WriteTx::claim_messages(self, session, owner, after, limit, lease_ms, max_bytes)
    }

    fn complete_presented(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        output: &Value,
        result: &Value,
        presentation: Option<&str>,
    ) -> StoreResult<u64> {
        WriteTx::complete_presented(self, claim, attempt_id, output, result, presentation)
    }

    fn control_claim(&mut self, run_id: &str, owner_id: &str) -> StoreResult<Claim> {
        WriteTx::control_claim(self, run_id, owner_id)
    }

    fn current_open_attempt(&self, run_id: &str) -> StoreResult<Option<(String, String)>> {
        WriteTx::current_open_attempt(self, run_id)
    }

    fn detach(&mut self, run_id: &str) -> StoreResult<bool> {
        WriteTx::detach(self, run_id)
    }

    fn effect_applying(&mut self, claim: &Claim, effect_id: &str) -> StoreResult<()> {
        WriteTx::effect_applying(self, claim, effect_id)
    }

    fn ensure_in_transaction(&self) -> StoreResult<()> {
        WriteTx::ensure_in_transaction(self)
    }

    fn expect_revision(&mut self, run_id: &str, expected: u64) -> StoreResult<()> {
        WriteTx::expect_revision(self, run_id, expected)
    }

    fn expire_due_decisions(&mut self) -> StoreResult<Vec<(String, String)>> {
        WriteTx::expire_due_decisions(self)
    }

    fn expire_due_interactions(&mut self) -> StoreResult<Vec<(String, String)>> {
        WriteTx::expire_due_interactions(self)
    }

    fn fail(
        &mut self,
        claim: &Claim,
        attempt_id: Option<&str>,
        outcome: &AttemptOutcome,
        error: &str,
    ) -> StoreResult<u64> {
        WriteTx::fail(self, claim, attempt_id, outcome, error)
    }

    fn fail_interaction(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        reason: &str,
        next: Option<(&str, Option<UnixMillis>)>,
        owner_id: &str,
    ) -> StoreResult<()> {
        WriteTx::fail_interaction(self, interaction_id, attempt_id, reason, next, owner_id)
    }

    fn fire_due_timers(&mut self) -> StoreResult<Vec<(String, String)>> {
        WriteTx::fire_due_timers(self)
    }

    fn fired_timer_of_attempt(&self, attempt_id: &str) -> StoreResult<Option<Value>> {
        WriteTx::fired_timer_of_attempt(self, attempt_id)
    }

    fn heartbeat(&mut self, claim: &Claim) -> StoreResult<()> {
        WriteTx::heartbeat(self, claim)
    }

    fn holds(&self, claim: &Claim) -> StoreResult<bool> {
        WriteTx::holds(self, claim)
    }

    fn hold_interactions(&mut self, holder: &Holder) -> StoreResult<usize> {
        WriteTx::hold_interactions(self, holder)
    }

    fn interaction_progress(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        message: &str,
        data: &Value,
    ) -> StoreResult<ProgressKept> {
        WriteTx::interaction_progress(self, interaction_id, attempt_id, message, data)
    }

    fn last_node_output(&self, run_id: &str) -> StoreResult<Option<Value>> {
        WriteTx::last_node_output(self, run_id)
    }

    fn latest_results(&self, run_id: &str) -> StoreResult<Vec<NodeResult>> {
        WriteTx::latest_results(self, run_id)
    }

    fn mounted_sources(&self, run_id: &str) -> StoreResult<Value> {
        WriteTx::mounted_sources(self, run_id)
    }

    fn node_started(
        &mut self,
        claim: &Claim,
        node_id: &str,
        deadline_at: Option<UnixMillis>,
    ) -> StoreResult<String> {
        WriteTx::node_started(self, claim, node_id, deadline_at)
    }

    fn notify(&mut self, claim: &Claim, content: &Value) -> StoreResult<String> {
        WriteTx::notify(self, claim, content)
    }

    fn now_ms(&self) -> UnixMillis {
        WriteTx::now_ms(self)
    }

    fn park(&mut self, claim: &Claim, available_at: Option<UnixMillis>) -> StoreResult<u64> {
        WriteTx::park(self, claim, available_at)
    }

    fn pause(&mut self, run_id: &str, fence: Fence<'_>) -> StoreResult<u64> {
        WriteTx::pause(self, run_id, fence)
    }

    fn progress(
        &mut self,
        claim: &Claim,
        message: &str,
        data: &Value,
    ) -> StoreResult<ProgressKept> {
        WriteTx::progress(self, claim, message, data)
    }

    fn put_value_chunk(
        &mut self,
        claim: &Claim,
        sha256: &str,
        bytes: u64,
        offset: u64,
        data: &[u8],
    ) -> StoreResult<ValuePut> {
        WriteTx::put_value_chunk(self, claim, sha256, bytes, offset, data)
    }

    fn put_interaction_value_chunk(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        sha256: &str,
        bytes: u64,
        offset: u64,
        data: &[u8],
    ) -> StoreResult<ValuePut> {
        WriteTx::put_interaction_value_chunk(
            self,
            interaction_id,
            attempt_id,
            sha256,
            bytes,
            offset,
            data,
        )
    }

    fn ready_runs(&self, limit: u32) -> StoreResult<Vec<String>> {
        WriteTx::ready_runs(self, limit)
    }

    fn record_child_exit(&mut self, child_epoch: i64, exit: &ChildExitRecord) -> StoreResult<()> {
        WriteTx::record_child_exit(self, child_epoch, exit)
    }

    fn record_child_handshake(&mut self, child_epoch: i64) -> StoreResult<()> {
        WriteTx::record_child_handshake(self, child_epoch)
    }

    fn record_child_launch(
        &mut self,
        run_id: &str,
        generation: u64,
        host_epoch: i64,
        mode: ChildMode,
    ) -> StoreResult<i64> {
        WriteTx::record_child_launch(self, run_id, generation, host_epoch, mode)
    }

    fn record_child_process(
        &mut self,
        child_epoch: i64,
        pid: u32,
        start_time: u64,
    ) -> StoreResult<()> {
        WriteTx::record_child_process(self, child_epoch, pid, start_time)
    }

    fn record_launch_facts(
        &mut self,
        claim: &Claim,
        definition: &Value,
        mounted_sources: &Value,
    ) -> StoreResult<()> {
        WriteTx::record_launch_facts(self, claim, definition, mounted_sources)
    }

    fn recover_expired_claims(
        &mut self,
        stalled_owner: Option<&str>,
    ) -> StoreResult<Vec<RecoveredRun>> {
        WriteTx::recover_expired_claims(self, stalled_owner)
    }

    fn refuse_accepted_before(&self, interaction_id: &str, payload: &Value) -> StoreResult<()> {
        WriteTx::refuse_accepted_before(self, interaction_id, payload)
    }

    fn release_after_launch_failure(
        &mut self,
        claim: &Claim,
        why: &str,
        retry_at: UnixMillis,
    ) -> StoreResult<RecoveredRun> {
        WriteTx::release_after_launch_failure(self, claim, why, retry_at)
    }

    fn release_at_shutdown(&mut self, claim: &Claim) -> StoreResult<RecoveredRun> {
        WriteTx::release_at_shutdown(self, claim)
    }

    fn release_interactions(&mut self, holder: &Holder) -> StoreResult<usize> {
        WriteTx::release_interactions(self, holder)
    }

    fn release_uncounted(&mut self, claim: &Claim, why: &str) -> StoreResult<RecoveredRun> {
        WriteTx::release_uncounted(self, claim, why)
    }

    fn repeated_submission(
        &self,
        interaction_id: &str,
        attempt_id: &str,
        payload: &Value,
    ) -> StoreResult<Option<(String, String)>> {
        WriteTx::repeated_submission(self, interaction_id, attempt_id, payload)
    }

    fn request_interaction(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        kind: InteractionKind,
        request: &Value,
        deadline_at: Option<UnixMillis>,
        present: &dyn Fn(&Holder) -> bool,
    ) -> StoreResult<String> {
        WriteTx::request_interaction(self, claim, attempt_id, kind, request, deadline_at, present)
    }

    fn require_decision_of(&self, run_id: &str, decision_id: &str) -> StoreResult<()> {
        WriteTx::require_decision_of(self, run_id, decision_id)
    }

    fn require_interaction_of(
        &self,
        run_id: &str,
        node_id: &str,
        interaction_id: &str,
    ) -> StoreResult<()> {
        WriteTx::require_interaction_of(self, run_id, node_id, interaction_id)
    }

    fn reserve_effect(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        effect_key: &str,
        fingerprint: &str,
        contract: RetryContract,
    ) -> StoreResult<Reservation> {
        WriteTx::reserve_effect(self, claim, attempt_id, effect_key, fingerprint, contract)
    }

    fn resolve_effect(
        &mut self,
        run_id: &str,
        effect_id: &str,
        result: &EffectResult,
        who: Provenance<'_>,
    ) -> StoreResult<u64> {
        WriteTx::resolve_effect(self, run_id, effect_id, result, who)
    }

    fn resume(&mut self, run_id: &str, fence: Fence<'_>) -> StoreResult<u64> {
        WriteTx::resume(self, run_id, fence)
    }

    fn retry_from_review(&mut self, run_id: &str, who: Provenance<'_>) -> StoreResult<u64> {
        WriteTx::retry_from_review(self, run_id, who)
    }

    fn retry_accepting_source(
        &mut self,
        run_id: &str,
        source_hash: &str,
        who: Provenance<'_>,
    ) -> StoreResult<u64> {
        WriteTx::retry_accepting_source(self, run_id, source_hash, who)
    }

    fn run(&self, run_id: &str) -> StoreResult<RunRecord> {
        WriteTx::run(self, run_id)
    }

    fn run_payload(&self, run_id: &str) -> StoreResult<(Value, Option<Value>, Value)> {
        WriteTx::run_payload(self, run_id)
    }

    fn run_state(&self, run_id: &str) -> StoreResult<(RunStatus, u64)> {
        WriteTx::run_state(self, run_id)
    }

    fn run_status(&self, run_id: &str) -> StoreResult<RunStatus> {
        WriteTx::run_status(self, run_id)
    }

    fn send_to_review(&mut self, claim: &Claim, reason: &str) -> StoreResult<u64> {
        WriteTx::send_to_review(self, claim, reason)
    }

    fn settle(
        &mut self,
        claim: &Claim,
        submission_id: &str,
        verdict: Result<(), String>,
    ) -> StoreResult<()> {
        WriteTx::settle(self, claim, submission_id, verdict)
    }

    fn settle_effect(
        &mut self,
        claim: &Claim,
        effect_id: &str,
        result: &EffectResult,
    ) -> StoreResult<()> {
        WriteTx::settle_effect(self, claim, effect_id, result)
    }

    fn start_run(&mut self, new: &NewRun) -> StoreResult<String> {
        WriteTx::start_run(self, new)
    }

    fn submission_payload(&self, submission_id: &str) -> StoreResult<Value> {
        WriteTx::submission_payload(self, submission_id)
    }

    fn submit(
        &mut self,
        interaction_id: &str,
        attempt_id: &str,
        payload: &Value,
        idempotency_key: Option<&str>,
    ) -> StoreResult<String> {
        WriteTx::submit(self, interaction_id, attempt_id, payload, idempotency_key)
    }

    fn take_revisions(&mut self) -> std::collections::BTreeMap<String, u64> {
        WriteTx::take_revisions(self)
    }

    fn take_runs_written(&mut self) -> Vec<(String, u64)> {
        WriteTx::take_runs_written(self)
    }

    fn reclaim_free_pages(&mut self, max_pages: u32) -> StoreResult<u64> {
        WriteTx::reclaim_free_pages(self, max_pages)
    }

    fn repair(&mut self) -> StoreResult<RepairReport> {
        WriteTx::repair(self)
    }

    fn transition(&mut self, claim: &Claim, req: &TransitionRequest) -> StoreResult<Transitioned> {
        WriteTx::transition(self, claim, req)
    }

    fn validating_submission(&self, run_id: &str) -> StoreResult<Option<String>> {
        WriteTx::validating_submission(self, run_id)
    }

    fn wait_for_decision(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        kind: DecisionKind,
        request: &Value,
    ) -> StoreResult<String> {
        WriteTx::wait_for_decision(self, claim, attempt_id, kind, request)
    }

    fn wait_until(
        &mut self,
        claim: &Claim,
        attempt_id: &str,
        wake: Wake,
        output: &Value,
    ) -> StoreResult<TimerSet> {
        WriteTx::wait_until(self, claim, attempt_id, wake, output)
    }
}
