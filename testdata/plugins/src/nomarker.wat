;; nomarker.wat: no gate_abi_v1 marker, and gate_classify with a wrong signature.
(module
  (memory (export "memory") 1)
  (func (export "gate_classify") (param i32 i32) (result i32) (i32.const 1)))
