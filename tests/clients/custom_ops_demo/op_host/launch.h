/* How the demo package's host functions launch their AICPU kernels. */
#ifndef HCCL_CUSTOM_DEMO_LAUNCH_H
#define HCCL_CUSTOM_DEMO_LAUNCH_H

#include <stdio.h>
#include <acl/acl_rt.h>
#include <hccl/hccl_types.h>
#include <hccl/hcomm_primitives.h>

#define CHK(call) do { int rc_ = (call); if (rc_ != 0) { fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, \
                       __LINE__, #call, rc_); return static_cast<HcclResult>(rc_); } } while (0)
#define ACL_CHK(call) do { if ((call) != ACL_SUCCESS) { fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, \
                           __LINE__, #call, aclGetRecentErrMsg()); return HCCL_E_RUNTIME; } } while (0)

/* Launch kernel `name` of the package's kernel JSON with a copy of args[0..size) on `stream`, then (one batch on
 * the stream's thread) give the kernel's thread its go (notify 0) and wait for its done (the stream's notify 0). */
HcclResult DemoLaunch(const char* name, const void* args, size_t size, ThreadHandle hostThread,
                      ThreadHandle kernelThread, aclrtStream stream);

#endif
