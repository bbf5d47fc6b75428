"""C of the emulated install for custom operators: the AICPU kernel runner of the core library.

``hcommsim_run_kernel(fn, args, &result)`` calls ``unsigned fn(void *args)`` on the calling (AICPU) thread
and returns 0, or the number of the signal that the kernel's own code raised (SIGSEGV, SIGBUS, SIGFPE,
SIGILL, SIGABRT): the handlers jump back out of the kernel on that thread only, on an alternate signal
stack, and hand any other thread's signal to the handler that was there before (so a crash elsewhere
still ends the process as it would have).  sim/aicpu.py calls it for every kernel launch.
"""
from __future__ import annotations

__all__ = ["KERNEL_RUNNER_C"]

KERNEL_RUNNER_C = r"""
/* ---- the AICPU kernel runner (cannlib/kernel_runner.py) ---- */
#include <setjmp.h>
#include <signal.h>

static const int hcommsim_kernel_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define HCOMMSIM_KERNEL_SIGNALS (sizeof hcommsim_kernel_signals / sizeof hcommsim_kernel_signals[0])
static struct sigaction hcommsim_previous[HCOMMSIM_KERNEL_SIGNALS];
static pthread_once_t hcommsim_handlers_once = PTHREAD_ONCE_INIT;
static __thread sigjmp_buf *hcommsim_kernel_jump;     /* set while this thread runs a kernel */
static __thread void *hcommsim_alt_stack;

static void hcommsim_kernel_signal(int sig, siginfo_t *info, void *context)
{
    (void)info; (void)context;
    if (hcommsim_kernel_jump != NULL) {
        sigjmp_buf *jump = hcommsim_kernel_jump;
        hcommsim_kernel_jump = NULL;
        siglongjmp(*jump, sig);
    }
    for (size_t i = 0; i < HCOMMSIM_KERNEL_SIGNALS; i++) {      /* not a kernel: what was there before */
        if (hcommsim_kernel_signals[i] == sig) {
            sigaction(sig, &hcommsim_previous[i], NULL);
            break;
        }
    }
    raise(sig);
}

static void hcommsim_install_handlers(void)
{
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = hcommsim_kernel_signal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < HCOMMSIM_KERNEL_SIGNALS; i++)
        sigaction(hcommsim_kernel_signals[i], &action, &hcommsim_previous[i]);
}

int hcommsim_run_kernel(void *fn, void *args, uint32_t *result)
{
    sigjmp_buf jump;
    int sig;
    pthread_once(&hcommsim_handlers_once, hcommsim_install_handlers);
    if (hcommsim_alt_stack == NULL) {          /* a stack overflow must still reach the handler */
        stack_t ss;
        hcommsim_alt_stack = malloc(1 << 16);
        if (hcommsim_alt_stack != NULL) {
            ss.ss_sp = hcommsim_alt_stack;
            ss.ss_size = 1 << 16;
            ss.ss_flags = 0;
            sigaltstack(&ss, NULL);
        }
    }
    *result = 0;
    sig = sigsetjmp(jump, 1);
    if (sig != 0)
        return sig;
    hcommsim_kernel_jump = &jump;
    *result = ((uint32_t (*)(void *))fn)(args);
    hcommsim_kernel_jump = NULL;
    return 0;
}
"""
