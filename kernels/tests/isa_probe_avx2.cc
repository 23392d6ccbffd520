// A deliberately bad SIMD-level object for the isa_symbols check's own test: it exports an
// inline function's weak (COMDAT) definition without "avx2" in its name. Never linked.
inline int probe_weak_function(int x) {
  return x * 3;
}

namespace braid::kernels::cpu::avx2 {
// Taking the address forces an out-of-line copy of the inline function into this object.
int (*probe_entry)(int) = &probe_weak_function;
}  // namespace braid::kernels::cpu::avx2
