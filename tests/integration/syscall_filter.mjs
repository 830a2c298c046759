// Runs a program under a system-call allow-list the way systemd's SystemCallFilter= does (no
// systemd needed): the sets named (e.g. "@system-service") are expanded with this machine's
// `systemd-analyze syscall-filter`, a small C launcher is generated and compiled with cc; it sets
// no_new_privs, installs a seccomp filter that answers every other call with EPERM (as
// SystemCallErrorNumber=EPERM) and execs the program. Used by package.test.mjs to check that the
// packaged unit's filter lets the gateway serve.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

// The system calls of `sets` (names and @groups), expanded recursively.
export function expandSyscallSets(sets) {
  const out = spawnSync('systemd-analyze', ['syscall-filter'], { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`systemd-analyze syscall-filter: ${out.stderr}`);
  const groups = {};
  let cur = null;
  for (const line of out.stdout.split('\n')) {
    const t = line.trim();
    if (!t || t.startsWith('#')) continue;
    if (line.startsWith('@')) { cur = t; groups[cur] = []; continue; }
    if (cur) groups[cur].push(t);
  }
  const names = new Set();
  const seen = new Set();
  const add = (x) => {
    if (!x.startsWith('@')) { names.add(x); return; }
    if (seen.has(x)) return;
    if (!groups[x]) throw new Error(`unknown system call set ${x}`);
    seen.add(x);
    for (const y of groups[x]) add(y);
  };
  for (const s of sets) add(s);
  return [...names].sort();
}

// Compiles the launcher for `names` into `dir`; returns its path.
export function buildLauncher(dir, names) {
  const checks = names.filter((n) => /^[a-z0-9_]+$/.test(n))
    .map((n) => `#ifdef __NR_${n}\n  __NR_${n},\n#endif`).join('\n');
  const src = `#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "add this architecture's AUDIT_ARCH_ value"
#endif
static const int kAllowed[] = {
${checks}
};
int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const size_t n = sizeof kAllowed / sizeof kAllowed[0];
  struct sock_filter* f = calloc(2 * n + 6, sizeof *f);
  size_t i = 0;
  f[i++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  f[i++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0);
  f[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  f[i++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
  for (size_t k = 0; k < n; ++k) {  /* equal: the ALLOW right after it; else skip it */
    f[i++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)kAllowed[k], 0, 1);
    f[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  }
  f[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA));
  struct sock_fprog prog = {(unsigned short)i, f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) { perror("no_new_privs"); return 4; }
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) { perror("seccomp"); return 5; }
  execv(argv[1], argv + 1);
  perror("execv");
  return 6;
}
`;
  fs.writeFileSync(path.join(dir, 'launcher.c'), src);
  const out = path.join(dir, 'launcher');
  const cc = spawnSync('cc', ['-O1', '-o', out, path.join(dir, 'launcher.c')], { encoding: 'utf8' });
  if (cc.status !== 0) throw new Error(`cc: ${cc.stderr}`);
  return out;
}
