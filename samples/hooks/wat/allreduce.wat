;; The averaging comm hook in hand-written WebAssembly text: zeroeng's built-in hook, as the Go
;; sample allreduce, with nothing but the ABI (docs/wasm-hook-abi.md) under it. Every rank
;; multiplies its bucket by 1/world, rounded to float32 as the built-in hook does (so the
;; results are bit-identical to it), and the ranks sum it in place.
;;
;; Build: wat2wasm allreduce.wat -o allreduce_wat.wasm
(module
  (import "zeroeng" "scale" (func $scale (param $h i32) (param $factor f64) (result i32)))
  (import "zeroeng" "all_reduce" (func $all_reduce (param $h i32) (param $op i32) (result i32)))

  ;; Required by the ABI even though this hook keeps nothing in it.
  (memory (export "memory") 1)

  ;; 1/world as a float32, widened to the f64 that scale takes.
  (global $inv (mut f64) (f64.const 1))

  ;; The marker: this module implements version 1 of the ABI.
  (func (export "zeroeng_hook_abi_v1"))

  (func (export "init") (param $rank i32) (param $world i32) (result i32)
    (global.set $inv
      (f64.promote_f32 (f32.div (f32.const 1) (f32.convert_i32_u (local.get $world)))))
    (i32.const 0))

  ;; scale(b, 1/world) then all_reduce(b, SUM); the first non-zero status is the result.
  (func (export "on_bucket") (param $b i32) (result i32)
    (local $status i32)
    (local.set $status (call $scale (local.get $b) (global.get $inv)))
    (if (local.get $status) (then (return (local.get $status))))
    (call $all_reduce (local.get $b) (i32.const 0))))
