import { QlrError } from "./errors.ts";
import type { RunAttempt } from "./model.ts";
import type { CoordinatorRecord } from "./ports.ts";

/**
 * Several coordinators on one store. A local attempt belongs to the node that dispatched it:
 * its journal, receipt, logs and process live on that node's host and under its state dir, so
 * no other node can read its evidence. A node is a runtime's stable identity (kept in its state
 * dir), so a restarted runtime on the same state dir recognises its own earlier attempts; each
 * start is a new incarnation, and a lease in store time says whether the node is alive.
 *
 * Rules:
 * - A claim belongs to nobody: any coordinator may dispatch it, and the attempt's version CAS
 *   lets exactly one `claimed → starting` commit; that commit records the owner.
 * - Recovery and execution control act only on their own node's attempts (and on attempts with
 *   no owner, written before owners were recorded, or by a runtime that is the store's only
 *   coordinator).
 * - A starting or running attempt whose owner's lease expired is never guessed at: another host
 *   cannot tell whether its process runs. It fails closed (reported once, state unchanged) and
 *   is settled by its own node when that returns, or resolved by an operator.
 */

/** This runtime as a node of a shared store. */
export interface NodeIdentity {
  /** Stable across restarts of one state dir: 1–64 characters of `A-Za-z0-9_.-`. */
  readonly nodeId: string;
  /** The host's name, for reports. */
  readonly host: string;
  /** The host's boot id, for reports; null where the platform has none. */
  readonly bootId: string | null;
}

/** How long a node's lease lasts after each heartbeat, in store time. */
export const COORDINATOR_LEASE_MS = 15_000;
/** How often a node renews its lease: a third of the lease, so two missed heartbeats are survived. */
export const COORDINATOR_RENEW_EVERY_MS = 5_000;
/**
 * How often a node looks for live peers (its pages take turns only beside one): a node that
 * starts beside a lone one is noticed within this, not at the next renewal.
 */
export const PEERS_CHECK_EVERY_MS = 1_000;

const NODE_ID_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;

export function validateNodeIdentity(node: NodeIdentity): NodeIdentity {
  if (!NODE_ID_PATTERN.test(node.nodeId))
    throw new QlrError(
      "invalid_request",
      `node id ${JSON.stringify(node.nodeId.slice(0, 80))} is not 1–64 characters of A-Za-z0-9_.-`,
    );
  if (node.host.length === 0 || node.host.length > 255)
    throw new QlrError("invalid_request", "a node's host name must be 1–255 characters");
  if (node.bootId !== null && (node.bootId.length === 0 || node.bootId.length > 64))
    throw new QlrError("invalid_request", "a node's boot id must be 1–64 characters");
  return node;
}

/** A start of this node: the next incarnation, its lease running from `nowMs`. */
export function registerNode(
  previous: CoordinatorRecord | null,
  node: NodeIdentity,
  nowMs: number,
): CoordinatorRecord {
  return {
    nodeId: node.nodeId,
    incarnation: (previous?.incarnation ?? 0) + 1,
    host: node.host,
    bootId: node.bootId,
    startedAtMs: nowMs,
    heartbeatAtMs: nowMs,
    leaseExpiresAtMs: nowMs + COORDINATOR_LEASE_MS,
  };
}

/** A heartbeat of the incarnation this runtime registered; a newer incarnation supersedes it. */
export function renewNode(
  current: CoordinatorRecord | null,
  nodeId: string,
  incarnation: number,
  nowMs: number,
): CoordinatorRecord {
  if (current === null || current.incarnation !== incarnation) {
    throw new QlrError(
      "conflict",
      `coordinator node ${nodeId} incarnation ${incarnation} was superseded${current === null ? "" : ` by incarnation ${current.incarnation}`}: another runtime uses this state dir`,
    );
  }
  return {
    ...current,
    heartbeatAtMs: nowMs,
    leaseExpiresAtMs: Math.max(current.leaseExpiresAtMs, nowMs + COORDINATOR_LEASE_MS),
  };
}

export type Ownership = "own" | "foreign_live" | "foreign_expired";

/**
 * Whose an attempt is, seen from `nodeId` at store time `nowMs`. `owner` is the owner node's
 * record (null when it never registered, which counts as expired).
 */
export function ownershipOf(
  attempt: RunAttempt,
  nodeId: string,
  owner: CoordinatorRecord | null,
  nowMs: number,
): Ownership {
  if (attempt.ownerNodeId === null || attempt.ownerNodeId === nodeId) return "own";
  if (owner !== null && owner.nodeId === attempt.ownerNodeId && owner.leaseExpiresAtMs > nowMs)
    return "foreign_live";
  return "foreign_expired";
}

/** The reason an orphaned attempt fails closed with (recorded once, shown in status and the API). */
export function orphanedReason(attempt: RunAttempt, owner: CoordinatorRecord | null): string {
  const where =
    owner === null
      ? "an unregistered node"
      : `host ${owner.host}${owner.bootId === null ? "" : ` (boot ${owner.bootId})`}`;
  return `owner node ${String(attempt.ownerNodeId)} on ${where} lost its lease: only that node can read the attempt's evidence, so it is left as it is until that node returns or an operator resolves it`;
}
