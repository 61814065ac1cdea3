// The retry policy: 3 attempts, 500 ms base, 20 s ceiling, exponential backoff with full jitter
// (a uniformly random wait in [0, min(ceiling, base * 2^n))). Jitter matters because several
// callers retrying in lockstep against one local server (which serialises inference anyway) turn a
// recovery into a thundering herd. A server's Retry-After / retry-after-ms hint wins, clamped to
// the ceiling. This is the only retry layer: nothing underneath retries again.

import { RemoteError } from "./classify.js";

/** How failed requests are retried. */
export interface RetryPolicy {
  /** Total attempts including the first (default 3). */
  attempts: number;
  /** First backoff window in ms (default 500). */
  baseMs: number;
  /** Longest wait in ms, also the clamp for server hints (default 20000). */
  ceilingMs: number;
}

export const DEFAULT_RETRY: Readonly<RetryPolicy> = { attempts: 3, baseMs: 500, ceilingMs: 20_000 };

/** Time and randomness, injectable so tests run the policy without waiting. */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms`, or rejects when `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** Uniform in [0, 1). */
  random(): number;
}

/** setTimeout-based sleep that rejects with the signal's reason on abort. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

export const SYSTEM_CLOCK: Clock = { now: () => Date.now(), sleep, random: Math.random };

/**
 * The wait before retry number `retry` (1 for the first retry): the server's hint when it gave
 * one (clamped to [0, ceiling]), else full jitter over min(ceiling, base * 2^(retry-1)).
 */
export function backoffMs(policy: RetryPolicy, retry: number, hintMs: number | null, random: () => number): number {
  if (hintMs !== null) return Math.min(Math.max(0, hintMs), policy.ceilingMs);
  const window = Math.min(policy.ceilingMs, policy.baseMs * 2 ** (retry - 1));
  return Math.floor(random() * window);
}

/** Validates a partial policy against the defaults; throws TypeError with the field at fault. */
export function retryPolicy(partial: Partial<RetryPolicy> = {}): RetryPolicy {
  const policy = { ...DEFAULT_RETRY, ...partial };
  if (!Number.isInteger(policy.attempts) || policy.attempts < 1) {
    throw new TypeError(`retry.attempts must be a positive integer, got ${String(policy.attempts)}`);
  }
  for (const key of ["baseMs", "ceilingMs"] as const) {
    if (!Number.isFinite(policy[key]) || policy[key] < 0) {
      throw new TypeError(`retry.${key} must be a non-negative number of milliseconds, got ${String(policy[key])}`);
    }
  }
  return policy;
}

/** Something observable about each retry, for logs and tests. */
export interface RetryEvent {
  attempt: number;
  error: RemoteError;
  waitMs: number;
}

/**
 * Runs `send` until it succeeds, fails with a class that is not retried, or runs out of attempts.
 * The error thrown carries `attempts`. `deadline` (epoch ms) stops retrying when the next wait
 * would pass it.
 */
export async function withRetry<T>(
  send: (attempt: number) => Promise<T>,
  options: {
    policy: RetryPolicy;
    clock: Clock;
    signal?: AbortSignal;
    deadline?: number;
    onRetry?: (event: RetryEvent) => void;
    counter?: { attempts: number };
  },
): Promise<T> {
  const { policy, clock, signal, deadline, onRetry, counter } = options;
  for (let attempt = 1; ; attempt++) {
    if (counter) counter.attempts++;
    try {
      return await send(attempt);
    } catch (thrown) {
      if (!(thrown instanceof RemoteError)) throw thrown;
      thrown.attempts = attempt;
      if (!thrown.retryable || attempt >= policy.attempts) throw thrown;
      const waitMs = backoffMs(policy, attempt, thrown.retryAfterMs, clock.random);
      if (deadline !== undefined && clock.now() + waitMs >= deadline) throw thrown;
      onRetry?.({ attempt, error: thrown, waitMs });
      try {
        await clock.sleep(waitMs, signal);
      } catch (reason) {
        throw new RemoteError("the request was canceled while waiting to retry", { kind: "canceled", cause: reason });
      }
    }
  }
}
