// LD_PRELOAD shim: CPUID faulting (ARCH_SET_CPUID) + SIGSEGV emulation, to present other cache sizes to Eigen/oneDNN.
// env: CPUID_L1D_KB, CPUID_L2_KB, CPUID_L3_KB (leaf 4 sets rescaled), CPUID_LOG=1 (count faults to stderr at exit),
//      CPUID_AMD=1 (leaf 0 vendor string AuthenticAMD), CPUID_NO_AVX512=1 (leaf 7 AVX-512 feature bits cleared;
//      both used by tests/test_quickstart.py's search for why Intel and AMD print different quickstart tables)
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <asm/prctl.h>
#include <cpuid.h>
static long l1kb, l2kb, l3kb; static volatile long nfault;
static int setcpuid(int on){ return syscall(SYS_arch_prctl, ARCH_SET_CPUID, on); }
static unsigned sets_for(unsigned ebx, long kb){ unsigned ways=(ebx>>22)+1, parts=((ebx>>12)&0x3ff)+1, line=(ebx&0xfff)+1; return (unsigned)(kb*1024/(ways*parts*line)) - 1; }
static void handler(int sig, siginfo_t *si, void *ctx){
  ucontext_t *uc = ctx; greg_t *g = uc->uc_mcontext.gregs;
  unsigned char *ip = (unsigned char*)g[REG_RIP];
  if (ip[0] != 0x0f || ip[1] != 0xa2) { signal(SIGSEGV, SIG_DFL); return; }
  unsigned leaf = (unsigned)g[REG_RAX], sub = (unsigned)g[REG_RCX], a, b, c, d;
  setcpuid(1); __cpuid_count(leaf, sub, a, b, c, d); setcpuid(0);
  if (leaf == 0 && getenv("CPUID_AMD")) { b = 0x68747541; d = 0x69746e65; c = 0x444d4163; }
  if (leaf == 7 && sub == 0 && getenv("CPUID_NO_AVX512")) {
    b &= ~((1u<<16)|(1u<<17)|(1u<<21)|(1u<<26)|(1u<<27)|(1u<<28)|(1u<<30)|(1u<<31));  // F DQ IFMA PF ER CD BW VL
    c &= ~((1u<<1)|(1u<<6)|(1u<<11)|(1u<<12)|(1u<<14));  // VBMI VBMI2 VNNI BITALG VPOPCNTDQ
    d &= ~((1u<<2)|(1u<<3)|(1u<<8)|(1u<<23));  // 4VNNIW 4FMAPS VP2INTERSECT FP16
  }
  if (leaf == 4 && (a & 31)) {
    unsigned type = a & 31, level = (a >> 5) & 7;
    if (level == 1 && type == 1 && l1kb) { unsigned line=(b&0xfff)+1, sets=c+1, ways=(unsigned)(l1kb*1024/(line*sets)); b = (b & 0x003fffff) | ((ways-1) << 22); }
    if (level == 2 && l2kb) c = sets_for(b, l2kb);
    if (level == 3 && l3kb) c = sets_for(b, l3kb);
  }
  g[REG_RAX] = a; g[REG_RBX] = b; g[REG_RCX] = c; g[REG_RDX] = d; g[REG_RIP] += 2; nfault++;
}
static void report(void){ if (getenv("CPUID_LOG")) fprintf(stderr, "cpuid shim: %ld cpuid faults emulated (L1d %ld L2 %ld L3 %ld KB)\n", nfault, l1kb, l2kb, l3kb); }
__attribute__((constructor)) static void init(void){
  char *e;
  if ((e = getenv("CPUID_L1D_KB"))) l1kb = atol(e);
  if ((e = getenv("CPUID_L2_KB"))) l2kb = atol(e);
  if ((e = getenv("CPUID_L3_KB"))) l3kb = atol(e);
  struct sigaction sa; memset(&sa, 0, sizeof sa); sa.sa_sigaction = handler; sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigaction(SIGSEGV, &sa, 0);
  if (setcpuid(0) != 0) { perror("ARCH_SET_CPUID"); return; }
  atexit(report);
}
