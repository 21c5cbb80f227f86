/**
 * Multi-tenant character radix tree: which worker (tenant) has seen which prompt prefix.
 *
 * One tree per model (the cache_aware policy keeps a Map model -> tree); a tenant is a worker id.
 * Every edge carries a label of UTF-16 code units (JavaScript string indices; an emoji is two code
 * units and an edge may end between them, consistently for insert and match). A node's children are
 * keyed by the first code unit of their label, so at most one child can continue a given text.
 *
 * Each node records the tenants whose inserted texts pass through it, with the recency of their last
 * insert through it. Invariant: a tenant holding a node holds all of the node's ancestors. So:
 * - per-tenant char count = sum of the label lengths of the nodes the tenant holds;
 * - totalChars = sum of all label lengths (shared prefixes counted once);
 * - a node no tenant holds has no tenant below it and is pruned.
 *
 * Recency: every insert takes the next value of a per-tree logical clock (`tick`) and stamps it on the
 * nodes of the inserted path for that tenant. A tick orders inserts strictly even when many share a
 * millisecond, and stays a small integer (a V8 Smi: no heap number allocated per stamp). The caller's
 * `nowMs` is kept per tenant (`tenantLastInsertMs`) for observability.
 *
 * Operations (n = text length, d = nodes on the path):
 * - insert(text, tenant, nowMs): walk/split edges, add one leaf for the unmatched tail; returns what the
 *   tenant held of text before (its prefix and that prefix's last tick). O(n + d).
 * - prefixMatch(text, accept?): the longest prefix of text present in the tree (optionally only
 *   through nodes held by an accepted tenant); `tenants` = the (accepted) tenants holding that whole
 *   prefix, `tenant` = the most recently used of them. Read-only. A match of 0 chars has no tenants.
 * - matchEachTenant(text, visit): every tenant's own matched prefix length along text's path (for
 *   cost models that weigh each candidate's cached share, not only the longest holder). Read-only.
 * - removeTenant(tenant): drop the tenant everywhere and prune nodes nobody holds. O(tenant's nodes).
 * - evictTenantToSize(tenant, maxChars): drop the tenant's least-recently-used leaves (nodes it holds
 *   with no child it holds) until its char count <= maxChars. O(tenant's nodes * log).
 * - evictTenantUpTo(tenant, tick): drop the tenant's nodes last inserted through at or before `tick`
 *   (insert returns the tick a text's held prefix had). O(tenant's nodes).
 *
 * Memory: labels are stored as self-contained copies (see flat-string.ts), never as V8 slices of the
 * caller's prompt, so the tree retains no more characters than totalChars(). Nodes are not re-merged
 * after removals (a chain of single-child nodes stays split); this costs a node header, never chars.
 *
 * Speed: edges are compared with `===` on a slice of the text (V8 compares flat strings with memcmp:
 * 20-90 ns per KB against 3-5 us per KB for a charCodeAt loop, measured on the project machine).
 * This allocates one slice header per edge visited, never per character, and copies no character
 * for slices of 13+ code units. A text that diverges inside an edge is scanned over the edge's first
 * 16 code units (where divergence usually is), then the rest is bisected with the same comparison.
 *
 * Texts: a plain string, or a long prompt kept in pieces (util/piece-text.ts), compared piece by piece so
 * it is never joined into one large string; a novel tail of it is copied into its leaf.
 *
 * Pure data structure: no timers, metrics or logging; time is passed in.
 */
import { flatCopy, flatSlice } from './flat-string.js';
import type { PieceText, RoutingText } from '../util/piece-text.js';

/** Result of prefixMatch. */
export interface PrefixMatch {
  /** Most recently used tenant among `tenants`; undefined when nothing matched. */
  readonly tenant: string | undefined;
  /** Length of the longest matched prefix, in UTF-16 code units. */
  readonly matchedChars: number;
  /** Every (accepted) tenant holding the whole matched prefix; empty when nothing matched. */
  readonly tenants: string[];
}

/** What a tenant held of an inserted text before the insert (RadixTree.insert). */
export interface HeldBefore {
  /** Characters of the text the tenant held as a prefix (0: none). */
  readonly heldChars: number;
  /** The tick of the tenant's last insert through that prefix (0 when it held none). */
  readonly heldTick: number;
}

/** Restricts a match to tenants the caller can use (e.g. the selectable workers). */
export type TenantFilter = (tenant: string) => boolean;

/** Mismatching spans at most this long are scanned code unit by code unit instead of bisected. */
const LINEAR_SCAN = 16;

class RadixNode {
  /** Tenant -> tick of its last insert through this node. */
  tenants = new Map<string, number>();
  /** Children keyed by the first code unit of their label; undefined while there are none. */
  children: Map<number, RadixNode> | undefined = undefined;

  constructor(
    public label: string,
    public parent: RadixNode | undefined,
  ) {}
}

class TenantRecord {
  chars = 0;
  lastInsertMs = 0;
}

export class RadixTree {
  private readonly root = new RadixNode('', undefined);
  private readonly records = new Map<string, TenantRecord>();
  private tick = 0;
  private total = 0;

  /** Registers a tenant with no cached text (idempotent). */
  addTenant(tenant: string): void {
    if (!this.records.has(tenant)) this.records.set(tenant, new TenantRecord());
  }

  hasTenant(tenant: string): boolean {
    return this.records.has(tenant);
  }

  /** Registered tenants, in registration order. */
  tenants(): string[] {
    return [...this.records.keys()];
  }

  /** Characters of the edges `tenant` holds (0 for an unknown tenant). */
  tenantCharCount(tenant: string): number {
    return this.records.get(tenant)?.chars ?? 0;
  }

  /** The nowMs of the tenant's last insert (undefined for an unknown tenant). */
  tenantLastInsertMs(tenant: string): number | undefined {
    return this.records.get(tenant)?.lastInsertMs;
  }

  /** Characters stored in the tree (shared prefixes counted once). */
  totalChars(): number {
    return this.total;
  }

  /**
   * Records that `tenant` has seen `text` (registers the tenant if needed). Returns what the tenant
   * held of `text` before: its matched prefix and the tick of that prefix's last insert.
   */
  insert(text: RoutingText, tenant: string, nowMs: number): HeldBefore {
    let record = this.records.get(tenant);
    if (record === undefined) {
      record = new TenantRecord();
      this.records.set(tenant, record);
    }
    record.lastInsertMs = nowMs;
    const tick = ++this.tick;
    const n = text.length;
    let node = this.root;
    let pos = 0;
    let heldChars = 0;
    let heldTick = 0;
    while (pos < n) {
      const first = text.charCodeAt(pos);
      let child = node.children?.get(first);
      if (child === undefined) {
        const leaf = new RadixNode(
          typeof text === 'string' ? flatSlice(text, pos) : flatCopy(text.slice(pos)),
          node,
        );
        leaf.tenants.set(tenant, tick);
        (node.children ??= new Map()).set(first, leaf);
        record.chars += n - pos;
        this.total += n - pos;
        break;
      }
      const common = commonPrefixLength(text, pos, child.label);
      if (common < child.label.length) child = this.split(node, child, common);
      const before = child.tenants.get(tenant);
      child.tenants.set(tenant, tick);
      if (before === undefined) record.chars += common;
      pos += common;
      if (before !== undefined) {
        // Held nodes form a prefix of the path (a holder holds every ancestor); the deepest one's
        // tick is its last insert, the recency of the whole held prefix.
        heldChars = pos;
        heldTick = before;
      }
      node = child;
    }
    return { heldChars, heldTick };
  }

  /** The longest prefix of `text` in the tree; only through nodes held by an accepted tenant. */
  prefixMatch(text: RoutingText, accept?: TenantFilter): PrefixMatch {
    const n = text.length;
    let node = this.root;
    let holder: RadixNode | undefined;
    let pos = 0;
    while (pos < n) {
      const child = node.children?.get(text.charCodeAt(pos));
      if (child === undefined || (accept !== undefined && !holdsAccepted(child, accept))) break;
      const common = commonPrefixLength(text, pos, child.label);
      pos += common;
      holder = child;
      if (common < child.label.length) break;
      node = child;
    }
    if (holder === undefined) return { tenant: undefined, matchedChars: 0, tenants: [] };
    const tenants: string[] = [];
    let best: string | undefined;
    let bestTick = -1;
    for (const [tenant, tick] of holder.tenants) {
      if (accept !== undefined && !accept(tenant)) continue;
      tenants.push(tenant);
      if (tick > bestTick) {
        bestTick = tick;
        best = tenant;
      }
    }
    return { tenant: best, matchedChars: pos, tenants };
  }

  /**
   * Per-tenant match along `text`'s path: calls `visit(tenant, chars)` for every tenant holding a
   * node on the path, with the characters of `text` that tenant holds as a prefix. A tenant may be
   * visited more than once (once per node it holds, in increasing `chars`); the last call is its
   * match. Tenants holding nothing of `text` are not visited. Read-only; O(path nodes x holders).
   */
  matchEachTenant(text: RoutingText, visit: (tenant: string, chars: number) => void): void {
    const n = text.length;
    let node = this.root;
    let pos = 0;
    while (pos < n) {
      const child = node.children?.get(text.charCodeAt(pos));
      if (child === undefined) return;
      const common = commonPrefixLength(text, pos, child.label);
      pos += common;
      for (const tenant of child.tenants.keys()) visit(tenant, pos);
      if (common < child.label.length) return;
      node = child;
    }
  }

  /** Removes every trace of `tenant`: its holdings, the nodes nobody else holds, its counts. */
  removeTenant(tenant: string): void {
    if (!this.records.delete(tenant)) return;
    const stack: RadixNode[] = [];
    pushHeldChildren(this.root, tenant, stack);
    while (stack.length > 0) {
      const node = stack.pop() as RadixNode;
      pushHeldChildren(node, tenant, stack);
      node.tenants.delete(tenant);
      if (node.tenants.size === 0) this.detach(node);
    }
  }

  /**
   * Drops `tenant` from every node it last inserted through at or before `tick` (a tick from
   * `insert`'s HeldBefore): what a least-recently-used cache has evicted once it has evicted a prefix
   * last used at `tick`. An ancestor's tick is never older than its descendants' (an insert stamps the
   * whole path), so what remains keeps the holder invariant. Returns the tenant's characters dropped.
   */
  evictTenantUpTo(tenant: string, tick: number): number {
    const record = this.records.get(tenant);
    if (record === undefined || record.chars === 0) return 0;
    const before = record.chars;
    const stack: RadixNode[] = [];
    pushHeldChildren(this.root, tenant, stack);
    while (stack.length > 0) {
      const node = stack.pop() as RadixNode;
      pushHeldChildren(node, tenant, stack);
      if ((node.tenants.get(tenant) as number) > tick) continue;
      node.tenants.delete(tenant);
      record.chars -= node.label.length;
      if (node.tenants.size === 0) this.detach(node);
    }
    return before - record.chars;
  }

  /**
   * Evicts `tenant`'s least-recently-used leaves until it holds <= maxChars characters.
   * Returns the number of the tenant's characters evicted.
   */
  evictTenantToSize(tenant: string, maxChars: number): number {
    const record = this.records.get(tenant);
    if (record === undefined || record.chars <= maxChars) return 0;
    const before = record.chars;
    // One pass over the tenant's nodes: its leaves go to an LRU heap, inner nodes remember how many
    // held children they have so they become leaves (and eviction candidates) when those are gone.
    const heldChildren = new Map<RadixNode, number>();
    const heap = new NodeHeap();
    const stack: RadixNode[] = [];
    pushHeldChildren(this.root, tenant, stack);
    while (stack.length > 0) {
      const node = stack.pop() as RadixNode;
      const count = pushHeldChildren(node, tenant, stack);
      if (count === 0) heap.push(node, node.tenants.get(tenant) as number);
      else heldChildren.set(node, count);
    }
    while (record.chars > maxChars && heap.size > 0) {
      const node = heap.pop();
      const parent = node.parent as RadixNode;
      node.tenants.delete(tenant);
      record.chars -= node.label.length;
      if (node.tenants.size === 0) this.detach(node);
      if (parent === this.root) continue;
      const left = (heldChildren.get(parent) as number) - 1;
      heldChildren.set(parent, left);
      if (left === 0) heap.push(parent, parent.tenants.get(tenant) as number);
    }
    return before - record.chars;
  }

  /**
   * Diagnostic (O(tree)): recomputes the counts from the nodes, for tests and audits.
   * `nodes` excludes the root.
   */
  recount(): { totalChars: number; tenantChars: Map<string, number>; nodes: number } {
    const tenantChars = new Map<string, number>();
    let totalChars = 0;
    let nodes = 0;
    const stack: RadixNode[] = [this.root];
    while (stack.length > 0) {
      const node = stack.pop() as RadixNode;
      if (node !== this.root) {
        nodes += 1;
        totalChars += node.label.length;
        for (const tenant of node.tenants.keys()) {
          tenantChars.set(tenant, (tenantChars.get(tenant) ?? 0) + node.label.length);
        }
      }
      if (node.children !== undefined) for (const child of node.children.values()) stack.push(child);
    }
    return { totalChars, tenantChars, nodes };
  }

  /** Splits `child` (a child of `parent`) after `at` code units; returns the new upper node. */
  private split(parent: RadixNode, child: RadixNode, at: number): RadixNode {
    const label = child.label;
    const upper = new RadixNode(flatSlice(label, 0, at), parent);
    upper.tenants = new Map(child.tenants);
    upper.children = new Map([[label.charCodeAt(at), child]]);
    child.label = flatSlice(label, at);
    child.parent = upper;
    (parent.children as Map<number, RadixNode>).set(label.charCodeAt(0), upper);
    return upper;
  }

  /** Unlinks a node nobody holds (its subtree is then empty too, by the invariant). */
  private detach(node: RadixNode): void {
    const parent = node.parent;
    if (parent?.children !== undefined) {
      parent.children.delete(node.label.charCodeAt(0));
      if (parent.children.size === 0) parent.children = undefined;
    }
    node.parent = undefined;
    this.total -= node.label.length;
  }
}

/** Pushes the children of `node` that `tenant` holds; returns how many. */
function pushHeldChildren(node: RadixNode, tenant: string, out: RadixNode[]): number {
  if (node.children === undefined) return 0;
  let count = 0;
  for (const child of node.children.values()) {
    if (child.tenants.has(tenant)) {
      out.push(child);
      count += 1;
    }
  }
  return count;
}

function holdsAccepted(node: RadixNode, accept: TenantFilter): boolean {
  for (const tenant of node.tenants.keys()) if (accept(tenant)) return true;
  return false;
}

/**
 * Length of the common prefix of `text` from `pos` and `label` (UTF-16 code units), without a
 * per-character allocation: whole-edge equality first, then a scan of the first 16 units, then
 * bisection with the same equality down to a final scan of <= 16 units.
 */
export function commonPrefixLength(text: RoutingText, pos: number, label: string): number {
  if (typeof text !== 'string') return piecesCommonPrefixLength(text, pos, label);
  const max = Math.min(label.length, text.length - pos);
  let lo = 0;
  let hi = max;
  if (max > LINEAR_SCAN) {
    const head = max === label.length ? label : label.slice(0, max);
    if (text.slice(pos, pos + max) === head) return max;
    // Texts that diverge inside an edge mostly do so near its start: scan a short window first.
    while (lo < LINEAR_SCAN && text.charCodeAt(pos + lo) === label.charCodeAt(lo)) lo += 1;
    if (lo < LINEAR_SCAN) return lo;
    while (hi - lo > LINEAR_SCAN) {
      const mid = (lo + hi) >>> 1;
      if (text.slice(pos + lo, pos + mid) === label.slice(lo, mid)) lo = mid;
      else hi = mid;
    }
  }
  while (lo < hi && text.charCodeAt(pos + lo) === label.charCodeAt(lo)) lo += 1;
  return lo;
}

/** commonPrefixLength over a text in pieces: piece by piece, against the matching span of the label. */
function piecesCommonPrefixLength(text: PieceText, pos: number, label: string): number {
  const max = Math.min(label.length, text.length - pos);
  if (max <= 0) return 0;
  let done = 0;
  for (let i = text.pieceAt(pos); done < max; i++) {
    const piece = text.pieces[i] as string;
    const at = pos + done - text.pieceStart(i);
    const span = Math.min(piece.length - at, max - done);
    if (span <= 0) continue;
    const common = commonPrefixLength(piece, at, label.slice(done, done + span));
    done += common;
    if (common < span) break;
  }
  return done;
}

/** Binary min-heap of nodes by tick (eviction order: least recently used first). */
class NodeHeap {
  private readonly nodes: RadixNode[] = [];
  private readonly keys: number[] = [];

  get size(): number {
    return this.nodes.length;
  }

  push(node: RadixNode, key: number): void {
    const nodes = this.nodes;
    const keys = this.keys;
    let i = nodes.length;
    nodes.push(node);
    keys.push(key);
    while (i > 0) {
      const up = (i - 1) >>> 1;
      if ((keys[up] as number) <= key) break;
      nodes[i] = nodes[up] as RadixNode;
      keys[i] = keys[up] as number;
      i = up;
    }
    nodes[i] = node;
    keys[i] = key;
  }

  pop(): RadixNode {
    const nodes = this.nodes;
    const keys = this.keys;
    const top = nodes[0] as RadixNode;
    const lastNode = nodes.pop() as RadixNode;
    const lastKey = keys.pop() as number;
    const n = nodes.length;
    if (n === 0) return top;
    let i = 0;
    while (true) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && (keys[child + 1] as number) < (keys[child] as number)) child += 1;
      if ((keys[child] as number) >= lastKey) break;
      nodes[i] = nodes[child] as RadixNode;
      keys[i] = keys[child] as number;
      i = child;
    }
    nodes[i] = lastNode;
    keys[i] = lastKey;
    return top;
  }
}
