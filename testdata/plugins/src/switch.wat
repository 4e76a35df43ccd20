;; switch.wat: behaves as the failure's body says. Body starts with (the input
;; is {"status":N,"body":"<word>..."}; the first letter of the body decides):
;;   t: trap          l: loop forever     b: grow memory without bound, then trap
;;   s: grow 40 pages, then answer       a: abstain
;;   anything else: {"class":"RATE_LIMIT","retryAfterMs":1000}
(module
  (import "gate" "input_read" (func $in (param i32)))
  (import "gate" "output_write" (func $out (param i32 i32) (result i32)))
  (import "gate" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{\"class\":\"RATE_LIMIT\",\"retryAfterMs\":1000}")
  (data (i32.const 64) "\"body\":\"")
  (data (i32.const 80) "switch called")
  (func (export "gate_abi_v1"))
  (func (export "gate_classify") (param $n i32) (result i32)
    (local $i i32) (local $c i32)
    (if (i32.gt_u (local.get $n) (i32.const 60000)) (then (return (i32.const 2))))
    (call $in (i32.const 1024))
    (call $log (i32.const 1) (i32.const 80) (i32.const 13))
    ;; find "body":" and take the next byte
    (local.set $c (i32.const 0))
    (block $found
      (loop $scan
        (br_if $found (i32.gt_u (i32.add (local.get $i) (i32.const 8)) (local.get $n)))
        (if (i64.eq (i64.load (i32.add (i32.const 1024) (local.get $i))) (i64.load (i32.const 64)))
          (then (local.set $c (i32.load8_u (i32.add (i32.const 1032) (local.get $i)))) (br $found)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $scan)))
    (if (i32.eq (local.get $c) (i32.const 116)) (then unreachable))             ;; t
    (if (i32.eq (local.get $c) (i32.const 108)) (then (loop $l (br $l))))        ;; l
    (if (i32.eq (local.get $c) (i32.const 98)) (then                             ;; b
      (loop $more (br_if $more (i32.ge_s (memory.grow (i32.const 16)) (i32.const 0))))
      unreachable))
    (if (i32.eq (local.get $c) (i32.const 115)) (then                            ;; s
      (if (i32.lt_s (memory.grow (i32.const 40)) (i32.const 0)) (then unreachable))))
    (if (i32.eq (local.get $c) (i32.const 97)) (then (return (i32.const 1))))   ;; a
    (drop (call $out (i32.const 0) (i32.const 42)))
    (i32.const 0)))
