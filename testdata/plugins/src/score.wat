;; score.wat: a scorer answering {"score":0.5}, or abstaining when the input has
;; no "remaining" member at all.
(module
  (import "gate" "input_read" (func $in (param i32)))
  (import "gate" "output_write" (func $out (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{\"score\":0.5}")
  (data (i32.const 16) "\"remaining\"")
  (func (export "gate_abi_v1"))
  (func (export "gate_score") (param $n i32) (result i32)
    (local $i i32)
    (if (i32.gt_u (local.get $n) (i32.const 60000)) (then (return (i32.const 2))))
    (call $in (i32.const 1024))
    (block $no
      (loop $scan
        (br_if $no (i32.gt_u (i32.add (local.get $i) (i32.const 11)) (local.get $n)))
        (if (i32.and
              (i64.eq (i64.load (i32.add (i32.const 1024) (local.get $i))) (i64.load (i32.const 16)))
              (i32.eq (i32.load16_u (i32.add (i32.const 1032) (local.get $i))) (i32.load16_u (i32.const 24))))
          (then
            (drop (call $out (i32.const 0) (i32.const 13)))
            (return (i32.const 0))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $scan)))
    (i32.const 1)))
