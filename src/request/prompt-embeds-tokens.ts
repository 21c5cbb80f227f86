/**
 * The prompt tokens of a `prompt_embeds` tensor (vLLM `--enable-prompt-embeds`): the base64 of a
 * `torch.save`d tensor of shape [tokens, hidden] (or [1, tokens, hidden], which vLLM squeezes), read
 * from the tensor's shape without loading the tensor.
 *
 * torch.save writes a zip archive (PyTorch's serialization notes) whose first entry is
 * `<archive>/data.pkl`, stored uncompressed: a pickle (protocol 2) whose object is
 * `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)`; `size` is
 * the shape, and the storage reference names the dtype. So only the first MAX_HEAD_BYTES of the
 * payload are decoded (base64 is read by its first characters alone), the zip's first local file
 * header is checked, and a small pickle reader walks that entry. It knows only the opcodes of
 * torch.load's weights-only unpickler (which vLLM loads with), keeps no object but tuples of numbers
 * and strings, takes at most one step per byte, and gives up (undefined) on anything else: another
 * opcode (protocol 4 or 5, which that unpickler refuses too), a compressed or other first entry, a
 * top-level object that is not a float32, bfloat16 or float16 tensor of 2 dimensions (or 3, the first
 * of 1), a size that is not a positive safe integer. A hostile payload costs a bounded decode and
 * walk and is priced as before (its key only); vLLM rejects what torch.load does not take.
 *
 * Checked against real torch.save payloads: test/fixtures/prompt-embeds (scripts/gen-prompt-embeds-fixture.py).
 *
 * Pure.
 */
import type { PieceText } from '../util/piece-text.js';

/** Payload bytes read: a tensor's data.pkl is a few hundred bytes after a header of about 100. */
const MAX_HEAD_BYTES = 4096;
/** Base64 characters that decode to MAX_HEAD_BYTES (a multiple of 4). */
const MAX_HEAD_CHARS = (MAX_HEAD_BYTES / 3) * 4;
const LOCAL_HEADER = 0x04034b50;
const REBUILD = new Set(['torch._utils._rebuild_tensor_v2', 'torch._utils._rebuild_tensor']);
/** The dtypes vLLM takes for prompt embeddings (float32, bfloat16, float16), by their storage type. */
const STORAGES = new Set(['torch.FloatStorage', 'torch.BFloat16Storage', 'torch.HalfStorage']);

/** A pickled value as far as this reader keeps it. */
type Value = number | string | boolean | null | Value[] | Global | Storage | Tensor | Opaque;

class Global {
  constructor(readonly name: string) {}
}
/** A persistent storage reference: ('storage', torch.<Type>Storage, key, location, numel). */
class Storage {
  constructor(readonly type: string) {}
}
class Tensor {
  constructor(readonly size: readonly Value[]) {}
}
class Opaque {}
const OPAQUE = new Opaque();
class Mark {}
const MARK = new Mark();

/**
 * The prompt tokens vLLM would take from this base64 `torch.save` payload, or undefined when it cannot
 * be read as a tensor of [tokens, hidden] or [1, tokens, hidden].
 */
export function promptEmbedsTokens(embeds: string | PieceText): number | undefined {
  const head = Buffer.from(embeds.slice(0, Math.min(embeds.length, MAX_HEAD_CHARS)).toString(), 'base64');
  const pickle = firstEntry(head);
  if (pickle === undefined) return undefined;
  const value = unpickle(pickle);
  if (!(value instanceof Tensor)) return undefined;
  const size = value.size;
  if (!size.every((d) => typeof d === 'number' && Number.isSafeInteger(d) && d >= 0)) return undefined;
  const dims = size as number[];
  const tokens = dims.length === 2 ? dims[0] : dims.length === 3 && dims[0] === 1 ? dims[1] : undefined;
  return tokens !== undefined && tokens > 0 ? tokens : undefined;
}

/** The bytes of the zip's first entry when it is a stored (uncompressed) `data.pkl`. */
function firstEntry(zip: Buffer): Buffer | undefined {
  if (zip.length < 30 || zip.readUInt32LE(0) !== LOCAL_HEADER) return undefined;
  const method = zip.readUInt16LE(8);
  const nameLength = zip.readUInt16LE(26);
  const extraLength = zip.readUInt16LE(28);
  if (method !== 0 || 30 + nameLength > zip.length) return undefined;
  const name = zip.toString('latin1', 30, 30 + nameLength);
  if (name !== 'data.pkl' && !name.endsWith('/data.pkl')) return undefined;
  const start = 30 + nameLength + extraLength;
  if (start >= zip.length) return undefined;
  // The entry's size may sit in a data descriptor after it; a pickle ends at its STOP opcode anyway.
  const size = zip.readUInt32LE(18);
  return zip.subarray(start, size > 0 ? Math.min(zip.length, start + size) : zip.length);
}

/** Runs the pickle up to its STOP; undefined on an opcode outside the subset or a malformed stream. */
function unpickle(data: Buffer): Value | undefined {
  const stack: Array<Value | Mark> = [];
  const memo = new Map<number, Value>();
  let pos = 0;
  const need = (n: number) => {
    if (pos + n > data.length) throw new RangeError('truncated');
    const at = pos;
    pos += n;
    return at;
  };
  const pop = (): Value => {
    const v = stack.pop();
    if (v === undefined || v instanceof Mark) throw new RangeError('stack');
    return v;
  };
  const popMark = (): Value[] => {
    const at = stack.lastIndexOf(MARK);
    if (at < 0) throw new RangeError('no mark');
    const items = stack.splice(at) as Array<Value | Mark>;
    items.shift();
    if (items.some((v) => v instanceof Mark)) throw new RangeError('mark');
    return items as Value[];
  };
  const line = () => {
    const end = data.indexOf(0x0a, pos);
    if (end < 0) throw new RangeError('truncated');
    const s = data.toString('latin1', pos, end);
    pos = end + 1;
    return s;
  };
  const text = (n: number) => data.toString('utf8', need(n), pos);
  try {
    while (pos < data.length) {
      const op = data[pos++] as number;
      switch (op) {
        case 0x80: // PROTO
          need(1);
          break;
        case 0x63: // GLOBAL
          stack.push(new Global(`${line()}.${line()}`));
          break;
        case 0x28: // MARK
          stack.push(MARK);
          break;
        case 0x29: // EMPTY_TUPLE
          stack.push([]);
          break;
        case 0x74: // TUPLE
          stack.push(popMark());
          break;
        case 0x85: // TUPLE1
          stack.push([pop()]);
          break;
        case 0x86: {
          // TUPLE2
          const b = pop();
          stack.push([pop(), b]);
          break;
        }
        case 0x87: {
          // TUPLE3
          const c = pop();
          const b = pop();
          stack.push([pop(), b, c]);
          break;
        }
        case 0x71: // BINPUT
          memo.set(data[need(1)] as number, top(stack));
          break;
        case 0x72: // LONG_BINPUT
          memo.set(data.readUInt32LE(need(4)), top(stack));
          break;
        case 0x68: // BINGET
        case 0x6a: {
          // LONG_BINGET
          const key = op === 0x68 ? (data[need(1)] as number) : data.readUInt32LE(need(4));
          const v = memo.get(key);
          if (v === undefined) return undefined;
          stack.push(v);
          break;
        }
        case 0x4b: // BININT1
          stack.push(data[need(1)] as number);
          break;
        case 0x4d: // BININT2
          stack.push(data.readUInt16LE(need(2)));
          break;
        case 0x4a: // BININT
          stack.push(data.readInt32LE(need(4)));
          break;
        case 0x8a: {
          // LONG1: a little-endian two's complement integer of n bytes (n <= 6 kept exact)
          const n = data[need(1)] as number;
          if (n > 6) return undefined;
          stack.push(n === 0 ? 0 : data.readIntLE(need(n), n));
          break;
        }
        case 0x58: // BINUNICODE
          stack.push(text(data.readUInt32LE(need(4))));
          break;
        case 0x55: // SHORT_BINSTRING
          stack.push(text(data[need(1)] as number));
          break;
        case 0x88: // NEWTRUE
          stack.push(true);
          break;
        case 0x89: // NEWFALSE
          stack.push(false);
          break;
        case 0x4e: // NONE
          stack.push(null);
          break;
        case 0x47: // BINFLOAT
          need(8);
          stack.push(OPAQUE);
          break;
        case 0x7d: // EMPTY_DICT
        case 0x5d: // EMPTY_LIST
        case 0x8f: // EMPTY_SET
          stack.push(OPAQUE);
          break;
        case 0x51: {
          // BINPERSID: the storage reference
          const pid = pop();
          const type = Array.isArray(pid) && pid[0] === 'storage' ? pid[1] : undefined;
          stack.push(type instanceof Global ? new Storage(type.name) : OPAQUE);
          break;
        }
        case 0x52: {
          // REDUCE: only the tensor's rebuild keeps its size; any other call is opaque
          const args = pop();
          const callable = pop();
          const rebuild = callable instanceof Global && REBUILD.has(callable.name) && Array.isArray(args);
          const storage = rebuild ? args[0] : undefined;
          const size = rebuild ? args[2] : undefined;
          const taken = storage instanceof Storage && STORAGES.has(storage.type) && Array.isArray(size);
          stack.push(taken ? new Tensor(size) : OPAQUE);
          break;
        }
        case 0x81: // NEWOBJ
          pop();
          pop();
          stack.push(OPAQUE);
          break;
        case 0x62: // BUILD (state on an object: the object stays)
        case 0x61: // APPEND
          pop();
          top(stack);
          break;
        case 0x73: // SETITEM
          pop();
          pop();
          top(stack);
          break;
        case 0x75: // SETITEMS
        case 0x65: // APPENDS
          popMark();
          top(stack);
          break;
        case 0x2e: // STOP
          return stack.length === 1 ? pop() : undefined;
        default:
          return undefined;
      }
    }
  } catch {
    return undefined;
  }
  return undefined;
}

function top(stack: Array<Value | Mark>): Value {
  const v = stack[stack.length - 1];
  if (v === undefined || v instanceof Mark) throw new RangeError('stack');
  return v;
}
