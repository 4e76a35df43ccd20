;; garbage.wat: returns 0 with an output that is not JSON.
(module
  (import "gate" "output_write" (func $out (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "class=RATE_LIMIT")
  (func (export "gate_abi_v1"))
  (func (export "gate_classify") (param i32) (result i32)
    (drop (call $out (i32.const 0) (i32.const 16)))
    (i32.const 0)))
