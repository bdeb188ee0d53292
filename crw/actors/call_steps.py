"""The steps and rows a session call builds: its packet, its spawn, send_input and
repair steps, and the turn_started and tokens_unmeasured rows of a step.

Pure builders over the call's fields (a mixin of `SessionCall`, which holds the
fields it declares): nothing here commits, writes a file or waits; the call
publishes what they build. It sets only the step writer's `built` packet.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from crw.actors.evidence_records import with_evidence
from crw.bus import steps as bus
from crw.engine.answers import answer, harvest
from crw.engine.config.role_names import WRITING_ROLES
from crw.engine.config.roles import RolePair
from crw.engine.config.workflow_nodes import Node
from crw.engine.holds import decision
from crw.engine.holds.decision import InPlace
from crw.engine.steps import packet, step_input
from crw.host.protocol import Thread
from crw.journal.rows import StepPublished, Tokens, TokensUnmeasured, TurnStarted

if TYPE_CHECKING:
    from crw.actors.session_context import SessionContext
    from crw.actors.step_writer import StepWriter


class CallSteps:
    """The builders of a session call's steps and rows."""

    ctx: SessionContext
    node: Node
    call: str
    task: str
    workspace: Path
    pair: RolePair
    steps: StepWriter
    rows: list[dict[str, Any]]

    def packet_text(self, **extra: Any) -> str:
        """The call's packet; `extra` are build_packet's repair members."""
        go_root = self.ctx.workflow.verifier.go_root if self.ctx.workflow.verifier else None
        return packet.build_packet(
            packet.Packet(
                call=self.call,
                role=self.node.role,
                workspace=str(self.workspace),
                task=self.task,
                output_schema=self.node.output_schema,
                tmpdir=self.ctx.tmpdir,
                go_root=go_root,
                run_json=str(self.ctx.run.run_json),
                writes=self.node.role in WRITING_ROLES,
                workflow_file=str(self.ctx.workflow.path),
                **extra,
            )
        )

    def in_place_step(self, plan: InPlace) -> StepPublished:
        """The new attempt that takes a held call's delivered turn again (ATT-32),
        its repair with the answer it repairs when it was the repair (ATT-33)."""
        repair = (
            {"previous_answer": plan.previous_answer, "repair_errors": plan.repair_errors}
            if plan.repair
            else {}
        )
        step = self._spawn_step(
            k=plan.k,
            attempt=plan.attempt,
            conversation_turn=plan.conversation_turn,
            note=plan.note,
            **repair,
        )
        step = step.model_copy(update={"replaces_turn": plan.replaces_turn, "repair": plan.repair})
        return step_input.refer(step, plan.previous_answer_in)

    def _spawn_step(
        self,
        *,
        k: int,
        attempt: int,
        conversation_turn: int,
        note: str | None = None,
        **extra: Any,
    ) -> StepPublished:
        note = note or packet.earlier_note(
            self.node.role,
            str(self.workspace),
            conversation_turn,
            attempt,
            decision.earlier_attempts(self.rows),
        )
        text = self.packet_text(
            note=note,
            **{key: extra[key] for key in ("previous_answer", "repair_errors") if key in extra},
        )
        packet_path, _ = bus.step_paths(self.ctx.run, self.call, k, attempt)
        self.steps.built = (str(packet_path), text)
        message = packet.spawn_message(
            self.call, k, attempt, self.node.role, str(self.workspace), str(packet_path)
        )
        step = StepPublished(
            call=self.call,
            k=k,
            op=packet.op(self.call, k),
            marker=packet.marker(self.call, k, attempt),
            attempt=attempt,
            action="spawn",
            input=message,
            input_digest=answer.digest(message),
            packet=str(packet_path),
            packet_digest=answer.digest(text),
            role=self.node.role,
            agent_type=self.pair.agent_type,
            model=self.pair.model,
            effort=self.pair.effort,
            workspace=str(self.workspace),
            note=note,
            conversation_turn=conversation_turn,
            repair=conversation_turn == 2,
            previous_answer=extra.get("previous_answer"),
            repair_errors=extra.get("repair_errors"),
            replaces_turn=extra.get("replaces_turn"),
        )
        return with_evidence(
            self.rows,
            step,
            workflow=self.ctx.workflow,
            run_id=self.ctx.run_id,
            call=self.call,
            node=self.node,
        )

    def _turn_started(
        self, step: StepPublished, turn_id: str, host_started_at: int | None = None
    ) -> TurnStarted:
        return TurnStarted(
            call=self.call,
            k=step.k,
            op=step.op,
            turn_id=turn_id,
            attempt=step.attempt,
            marker=step.marker,
            conversation_turn=step.conversation_turn,
            replaces_turn=step.replaces_turn,
            host_started_at=host_started_at,
        )

    def repair_step(
        self,
        step: StepPublished,
        thread: Thread,
        named: harvest.Repair,
        seen: Tokens,
        call_tokens: Tokens,
    ) -> StepPublished:
        """The one repair's step, naming what the harvest found (`named`): send_input
        on the open subagent, a spawn when it is closed (its subagent is gone: the
        repair goes to a new one)."""
        errors, previous = named.errors, named.previous
        attempt, k = step.attempt or 1, (step.k or 1) + 1
        if thread.status.type != "notLoaded":
            mark = packet.marker(self.call, k, attempt)
            message = packet.send_input_message(
                mark, packet.repair_text(errors, previous, self.node.output_schema)
            )
            repair = StepPublished(
                call=self.call,
                k=k,
                op=packet.op(self.call, k),
                marker=mark,
                attempt=attempt,
                action="send_input",
                input=message,
                input_digest=answer.digest(message),
                role=self.node.role,
                agent_type=self.pair.agent_type,
                model=self.pair.model,
                effort=self.pair.effort,
                workspace=str(self.workspace),
                agent_id=thread.id,
                previous_answer=previous,
                repair_errors=errors,
                tokens_seen=seen,
                call_tokens=call_tokens,
                conversation_turn=2,
                repair=True,
            )
        else:
            repair = self._spawn_step(
                k=k,
                attempt=attempt,
                conversation_turn=2,
                previous_answer=previous,
                repair_errors=errors,
            )
            repair = repair.model_copy(update={"call_tokens": call_tokens})
        return step_input.fold(repair)

    def _unmeasured(self, step: StepPublished) -> TokensUnmeasured:
        return TokensUnmeasured(
            call=self.call,
            pauses=False,
            k=step.k,
            op=step.op,
            marker=step.marker,
            attempt=step.attempt,
            error="the rollout could not be read",
        )
