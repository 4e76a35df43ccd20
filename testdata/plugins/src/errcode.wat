;; errcode.wat: returns error code 7.
(module
  (memory (export "memory") 1)
  (func (export "gate_abi_v1"))
  (func (export "gate_classify") (param i32) (result i32) (i32.const 7)))
