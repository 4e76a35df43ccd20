// The Octafuse classifier as a gate/v1 plugin, in AssemblyScript.
//
// Octafuse (a made-up gateway) answers HTTP 200 with the error in the body,
// {"code":"OCTA_THROTTLED","wait_ms":1500}:
//
//   OCTA_THROTTLED -> RATE_LIMIT, retryAfterMs = wait_ms (null when absent)
//   OCTA_BUSY      -> OVERLOADED, retryAfterMs = wait_ms (null when absent)
//   OCTA_CREDITS   -> QUOTA,      retryAfterMs = null
//   anything else  -> abstain (1): the next classifier decides
//
// Like the WAT version it scans the failure's JSON for the codes as bytes and
// allocates nothing per call (the stub runtime; one input buffer, reused).
//
// Speed: the host stops runaway plugins by checking at every loop iteration
// whether the call's deadline has passed, and each check costs tens of
// nanoseconds, so the scan looks at eight bytes per iteration (the "has zero
// byte" trick on 64-bit words) and compares candidates with whole-word loads.
//
// Build: npm ci && npm run build   (writes build/octafuse.wasm)

@external("gate", "input_read")
declare function input_read(ptr: usize): void;

@external("gate", "output_write")
declare function output_write(ptr: usize, len: i32): i32;

// The gate/v1 marker.
export function gate_abi_v1(): void {}

const OUT_CAP: i32 = 256;
const OUT: usize = heap.alloc(OUT_CAP); // runs once, in _initialize
let inBuf: usize = 0;
let inCap: i32 = 0;

const ONES: u64 = 0x0101010101010101;
const HIGHS: u64 = 0x8080808080808080;

// find returns the address of the first byte b in [p, end) followed by the
// little-endian word w4 starting at it and then the byte b5, or 0.
function find(p: usize, end: usize, b: u8, w4: u32, b5: u8): usize {
  const spread = <u64>b * ONES;
  while (p < end) {
    const x = load<u64>(p) ^ spread;
    let m = (x - ONES) & ~x & HIGHS; // a high bit where x has a zero byte (or a harmless false positive)
    while (m != 0) {
      const q = p + <usize>(ctz(m) >> 3);
      if (q + 5 <= end && load<u32>(q) == w4 && load<u8>(q, 4) == b5) return q;
      m &= m - 1;
    }
    p += 8;
  }
  return 0;
}

// waitMs parses the digits after "wait_ms" (skipping up to 6 bytes of quotes,
// backslashes, colons and spaces); -1 when there are none. It looks after the
// code first (where Octafuse puts it), then before.
function waitMs(code: usize, end: usize): i64 {
  let p = find(code, end, 0x77, 0x74696177, 0x5f); // "w" "wait" "_"
  if (p == 0) p = find(inBuf, code, 0x77, 0x74696177, 0x5f);
  if (p == 0 || p + 7 > end || load<u16>(p, 5) != 0x736d) return -1; // "ms"
  p += 7;
  let skipped = 0;
  while (p < end && skipped < 6 && <u32>(load<u8>(p) - 48) >= 10) {
    p++;
    skipped++;
  }
  let v: i64 = 0;
  let digits = 0;
  while (p < end && digits < 12) {
    const d = <u32>load<u8>(p) - 48;
    if (d >= 10) break;
    v = v * 10 + <i64>d;
    p++;
    digits++;
  }
  return digits == 0 ? -1 : v;
}

// Bytes is a UTF-8 string prepared once, in _initialize, to be copied whole.
class Bytes {
  ptr: usize;
  len: i32;
  constructor(s: string) {
    const buf = String.UTF8.encode(s);
    this.ptr = changetype<usize>(buf);
    this.len = buf.byteLength;
  }
}

// put copies b to OUT+at and returns the new end.
function put(at: i32, b: Bytes): i32 {
  memory.copy(OUT + <usize>at, b.ptr, <usize>b.len);
  return at + b.len;
}

// putInt writes v >= 0 in decimal at OUT+at and returns the new end.
function putInt(at: i32, v: i64): i32 {
  const scratch = OUT + <usize>OUT_CAP - 1;
  let p = scratch;
  do {
    store<u8>(p, <u8>(48 + <i32>(v % 10)));
    p--;
    v /= 10;
  } while (v != 0);
  const n = <i32>(scratch - p);
  memory.copy(OUT + <usize>at, p + 1, <usize>n);
  return at + n;
}

// The output's beginnings, one per class, and its endings.
const RATE_LIMIT = new Bytes('{"class":"RATE_LIMIT","retryAfterMs":');
const OVERLOADED = new Bytes('{"class":"OVERLOADED","retryAfterMs":');
const QUOTA = new Bytes('{"class":"QUOTA","retryAfterMs":');
const NULL_END = new Bytes("null}");
const END = new Bytes("}");

export function gate_classify(len: i32): i32 {
  if (len + 16 > inCap) {
    if (inBuf != 0) heap.free(inBuf);
    inCap = len + 16 < 4096 ? 4096 : len + 16; // 16 bytes of slack for word loads
    inBuf = heap.alloc(<usize>inCap);
  }
  input_read(inBuf);
  const end = inBuf + <usize>len;

  let q = find(inBuf, end, 0x4f, 0x4154434f, 0x5f); // "O" "OCTA" "_"
  if (q == 0) return 1; // not Octafuse's: abstain
  q += 5;
  let head: Bytes;
  let hint: i64 = -1;
  if (q + 9 <= end && load<u64>(q) == 0x454c54544f524854 && load<u8>(q, 8) == 0x44) { // THROTTLED
    head = RATE_LIMIT;
    hint = waitMs(q, end);
  } else if (q + 4 <= end && load<u32>(q) == 0x59535542) { // BUSY
    head = OVERLOADED;
    hint = waitMs(q, end);
  } else if (q + 7 <= end && load<u32>(q) == 0x44455243 && (load<u32>(q, 4) & 0xffffff) == 0x535449) { // CREDITS
    head = QUOTA;
  } else {
    return 1;
  }

  let p = put(0, head);
  if (hint < 0) {
    p = put(p, NULL_END);
  } else {
    p = put(putInt(p, hint), END);
  }
  output_write(OUT, p);
  return 0;
}
