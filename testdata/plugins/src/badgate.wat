;; badgate.wat: imports an unknown gate function and output_write with a wrong signature.
(module
  (import "gate" "fetch" (func (param i32)))
  (import "gate" "output_write" (func (param i32)))
  (memory (export "memory") 1)
  (func (export "gate_abi_v1"))
  (func (export "gate_classify") (param i32) (result i32) (i32.const 1)))
