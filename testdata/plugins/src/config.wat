;; config.wat: _initialize counts its runs; gate_init keeps the config, and
;; gate_classify writes it back as the verdict (the config holds one). When the
;; input contains "count", the verdict is {"class":"AUTH","retryAfterMs":N} with N
;; the number of _initialize runs of this instance (always 1).
(module
  (import "gate" "input_read" (func $in (param i32)))
  (import "gate" "output_write" (func $out (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $cfglen (mut i32) (i32.const 0))
  (global $inits (mut i32) (i32.const 0))
  (data (i32.const 0) "count")
  (data (i32.const 16) "{\"class\":\"AUTH\",\"retryAfterMs\":0}")
  (func (export "gate_abi_v1"))
  (func (export "_initialize") (global.set $inits (i32.add (global.get $inits) (i32.const 1))))
  (func (export "gate_init") (param $n i32) (result i32)
    (call $in (i32.const 1024))
    (global.set $cfglen (local.get $n))
    (i32.const 0))
  (func (export "gate_classify") (param $n i32) (result i32)
    (call $in (i32.const 8192))
    ;; input starts with {"status":... ; "count" anywhere in the first bytes of the body
    (if (i32.and (i32.ge_u (local.get $n) (i32.const 5))
          (i32.eq (i32.load8_u (i32.const 8192)) (i32.const 123)))
      (then
        (if (i32.ne (call $has_count (local.get $n)) (i32.const 0))
          (then
            (i32.store8 (i32.const 47) (i32.add (i32.const 48) (global.get $inits)))
            (drop (call $out (i32.const 16) (i32.const 33)))
            (return (i32.const 0))))))
    (drop (call $out (i32.const 1024) (global.get $cfglen)))
    (i32.const 0))
  (func $has_count (param $n i32) (result i32)
    (local $i i32)
    (block $no
      (loop $scan
        (br_if $no (i32.gt_u (i32.add (local.get $i) (i32.const 5)) (local.get $n)))
        (if (i32.and
              (i32.eq (i32.load (i32.add (i32.const 8192) (local.get $i))) (i32.load (i32.const 0)))
              (i32.eq (i32.load8_u (i32.add (i32.const 8196) (local.get $i))) (i32.const 116)))
          (then (return (i32.const 1))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $scan)))
    (i32.const 0)))
