;; octafuse.wat — a gate/v1 classifier for the (made-up) Octafuse gateway, in
;; hand-written WebAssembly text. Octafuse answers HTTP 200 with an error in the
;; body, {"code":"OCTA_THROTTLED","wait_ms":1500}, which no status-based rule
;; catches:
;;
;;   OCTA_THROTTLED -> RATE_LIMIT, retryAfterMs = wait_ms (null when absent)
;;   OCTA_BUSY      -> OVERLOADED, retryAfterMs = wait_ms (null when absent)
;;   OCTA_CREDITS   -> QUOTA,      retryAfterMs = null
;;   anything else  -> abstain (return 1): the next classifier decides
;;
;; It scans the failure's JSON for the codes as plain bytes (they contain no
;; character JSON escapes), which is enough for a gateway whose codes are unique
;; strings; examples/plugins/go/octafuse parses the JSON properly.
;;
;; Speed: the host stops runaway plugins by checking, at every loop iteration,
;; whether the call's deadline has passed (wazero's WithCloseOnContextDone), and
;; each check costs tens of nanoseconds. So this module loops as little as it
;; can: it looks for a byte eight bytes at a time (the "has zero byte" trick on
;; 64-bit words) and compares candidates with whole-word loads.
;;
;; Build: wat2wasm octafuse.wat -o octafuse.wasm   (Debian package: wabt)
(module
  (import "gate" "input_read" (func $input_read (param i32)))
  (import "gate" "output_write" (func $output_write (param i32 i32) (result i32)))

  ;; 0..1023 constants, 1024..2047 the output, 4096.. the input (plus 16 bytes
  ;; of slack, so word loads past its end stay in memory).
  (memory (export "memory") 1)
  (global $OUT i32 (i32.const 1024))
  (global $IN i32 (i32.const 4096))

  (data (i32.const 64)  "{\"class\":\"")           ;; 10
  (data (i32.const 80)  "\",\"retryAfterMs\":")    ;; 17
  (data (i32.const 112) "RATE_LIMIT")              ;; 10
  (data (i32.const 128) "OVERLOADED")              ;; 10
  (data (i32.const 144) "QUOTA")                   ;; 5
  (data (i32.const 160) "null}")                   ;; 5

  (func (export "gate_abi_v1"))

  ;; $find returns the address of the first byte b in [p, end) that starts the
  ;; four bytes w4 (little-endian i32) and is followed by the byte b5, or 0.
  (func $find (param $p i32) (param $end i32) (param $b i32) (param $w4 i32) (param $b5 i32) (result i32)
    (local $x i64) (local $m i64) (local $q i32) (local $spread i64)
    (local.set $spread (i64.mul (i64.extend_i32_u (local.get $b)) (i64.const 0x0101010101010101)))
    (block $none
      (loop $words
        (br_if $none (i32.ge_u (local.get $p) (local.get $end)))
        (local.set $x (i64.xor (i64.load (local.get $p)) (local.get $spread)))
        ;; high bit set in each byte of $m where $x has a zero byte (and maybe
        ;; a few false positives, which the comparison below rejects)
        (local.set $m (i64.and
          (i64.and (i64.sub (local.get $x) (i64.const 0x0101010101010101))
                   (i64.xor (local.get $x) (i64.const -1)))
          (i64.const 0x8080808080808080)))
        (block $next
          (loop $candidates
            (br_if $next (i64.eqz (local.get $m)))
            (local.set $q (i32.add (local.get $p)
              (i32.wrap_i64 (i64.shr_u (i64.ctz (local.get $m)) (i64.const 3)))))
            (if (i32.and
                  (i32.le_u (i32.add (local.get $q) (i32.const 5)) (local.get $end))
                  (i32.and
                    (i32.eq (i32.load (local.get $q)) (local.get $w4))
                    (i32.eq (i32.load8_u offset=4 (local.get $q)) (local.get $b5))))
              (then (return (local.get $q))))
            (local.set $m (i64.and (local.get $m) (i64.sub (local.get $m) (i64.const 1))))
            (br $candidates)))
        (local.set $p (i32.add (local.get $p) (i32.const 8)))
        (br $words)))
    (i32.const 0))

  ;; $wait parses the digits after "wait_ms" (after at most 6 bytes of quotes,
  ;; backslashes, colons and spaces); -1 when there are none. It looks after the
  ;; code first (where Octafuse puts it), then before.
  (func $wait (param $code i32) (param $end i32) (result i64)
    (local $p i32) (local $c i32) (local $v i64) (local $k i32)
    ;; "wait" = 0x74696177, then "_" (0x5f); then "ms" checked below
    (local.set $p (call $find (local.get $code) (local.get $end) (i32.const 0x77) (i32.const 0x74696177) (i32.const 0x5f)))
    (if (i32.eqz (local.get $p))
      (then (local.set $p (call $find (global.get $IN) (local.get $code) (i32.const 0x77) (i32.const 0x74696177) (i32.const 0x5f)))))
    (if (i32.eqz (local.get $p)) (then (return (i64.const -1))))
    (if (i32.gt_u (i32.add (local.get $p) (i32.const 7)) (local.get $end)) (then (return (i64.const -1))))
    (if (i32.ne (i32.load16_u offset=5 (local.get $p)) (i32.const 0x736d)) (then (return (i64.const -1))))
    (local.set $p (i32.add (local.get $p) (i32.const 7)))
    (block $sep
      (loop $skip
        (br_if $sep (i32.ge_u (local.get $p) (local.get $end)))
        (local.set $c (i32.load8_u (local.get $p)))
        (br_if $sep (i32.lt_u (i32.sub (local.get $c) (i32.const 48)) (i32.const 10)))
        (br_if $sep (i32.ge_u (local.get $k) (i32.const 6)))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br $skip)))
    (local.set $k (i32.const 0))
    (block $num
      (loop $digits
        (br_if $num (i32.ge_u (local.get $p) (local.get $end)))
        (local.set $c (i32.sub (i32.load8_u (local.get $p)) (i32.const 48)))
        (br_if $num (i32.ge_u (local.get $c) (i32.const 10)))
        (br_if $num (i32.ge_u (local.get $k) (i32.const 12)))
        (local.set $v (i64.add (i64.mul (local.get $v) (i64.const 10)) (i64.extend_i32_u (local.get $c))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br $digits)))
    (if (i32.eqz (local.get $k)) (then (return (i64.const -1))))
    (local.get $v))

  ;; $itoa writes v >= 0 in decimal at dst and returns the end: the digits go
  ;; right to left into a scratch area, then one copy.
  (func $itoa (param $dst i32) (param $v i64) (result i32)
    (local $p i32)
    (local.set $p (i32.const 1000))
    (loop $digit
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.wrap_i64 (i64.rem_u (local.get $v) (i64.const 10)))))
      (local.set $v (i64.div_u (local.get $v) (i64.const 10)))
      (br_if $digit (i64.ne (local.get $v) (i64.const 0))))
    (memory.copy (local.get $dst) (local.get $p) (i32.sub (i32.const 1000) (local.get $p)))
    (i32.add (local.get $dst) (i32.sub (i32.const 1000) (local.get $p))))

  (func (export "gate_classify") (param $len i32) (result i32)
    (local $need i32) (local $end i32) (local $q i32) (local $cls i32) (local $clen i32) (local $hint i64) (local $p i32)
    ;; make room for the input and 16 bytes of slack
    (local.set $need (i32.shr_u (i32.add (i32.add (global.get $IN) (local.get $len)) (i32.const 65551)) (i32.const 16)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then (if (i32.lt_s (memory.grow (i32.sub (local.get $need) (memory.size))) (i32.const 0))
        (then (return (i32.const 2))))))
    (call $input_read (global.get $IN))
    (local.set $end (i32.add (global.get $IN) (local.get $len)))

    ;; "OCTA" = 0x4154434f, then "_"
    (local.set $q (call $find (global.get $IN) (local.get $end) (i32.const 0x4f) (i32.const 0x4154434f) (i32.const 0x5f)))
    (if (i32.eqz (local.get $q)) (then (return (i32.const 1))))
    (local.set $q (i32.add (local.get $q) (i32.const 5))) ;; past "OCTA_"
    (local.set $hint (i64.const -1))
    (block $matched
      ;; "THROTTLE" + "D"
      (if (i32.and (i32.le_u (i32.add (local.get $q) (i32.const 9)) (local.get $end))
            (i32.and (i64.eq (i64.load (local.get $q)) (i64.const 0x454c54544f524854))
                     (i32.eq (i32.load8_u offset=8 (local.get $q)) (i32.const 0x44))))
        (then (local.set $cls (i32.const 112)) (local.set $clen (i32.const 10))
              (local.set $hint (call $wait (local.get $q) (local.get $end))) (br $matched)))
      ;; "BUSY"
      (if (i32.and (i32.le_u (i32.add (local.get $q) (i32.const 4)) (local.get $end))
            (i32.eq (i32.load (local.get $q)) (i32.const 0x59535542)))
        (then (local.set $cls (i32.const 128)) (local.set $clen (i32.const 10))
              (local.set $hint (call $wait (local.get $q) (local.get $end))) (br $matched)))
      ;; "CREDITS": "CRED" + "ITS"
      (if (i32.and (i32.le_u (i32.add (local.get $q) (i32.const 7)) (local.get $end))
            (i32.and (i32.eq (i32.load (local.get $q)) (i32.const 0x44455243))
                     (i32.eq (i32.and (i32.load offset=4 (local.get $q)) (i32.const 0xffffff)) (i32.const 0x535449))))
        (then (local.set $cls (i32.const 144)) (local.set $clen (i32.const 5)) (br $matched)))
      (return (i32.const 1)))

    ;; {"class":"<CLASS>","retryAfterMs":<n|null>}
    (memory.copy (global.get $OUT) (i32.const 64) (i32.const 10))
    (local.set $p (i32.add (global.get $OUT) (i32.const 10)))
    (memory.copy (local.get $p) (local.get $cls) (local.get $clen))
    (local.set $p (i32.add (local.get $p) (local.get $clen)))
    (memory.copy (local.get $p) (i32.const 80) (i32.const 17))
    (local.set $p (i32.add (local.get $p) (i32.const 17)))
    (if (i64.lt_s (local.get $hint) (i64.const 0))
      (then
        (memory.copy (local.get $p) (i32.const 160) (i32.const 5))
        (local.set $p (i32.add (local.get $p) (i32.const 5))))
      (else
        (local.set $p (call $itoa (local.get $p) (local.get $hint)))
        (i32.store8 (local.get $p) (i32.const 125)) ;; }
        (local.set $p (i32.add (local.get $p) (i32.const 1)))))
    (drop (call $output_write (global.get $OUT) (i32.sub (local.get $p) (global.get $OUT))))
    (i32.const 0))
)
