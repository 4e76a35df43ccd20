;; loop.wat: a classifier that never returns.
(module
  (memory (export "memory") 1)
  (func (export "gate_abi_v1"))
  (func (export "gate_classify") (param i32) (result i32)
    (loop $forever (br $forever))
    (i32.const 0)))
