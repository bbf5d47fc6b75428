/* The kernel JSON is found next to this library, in its vendor directory, whatever the vendor is called. */
#include <dlfcn.h>
#include <string>
#include "demo_types.h"
#include "launch.h"

static thread_local aclrtBinHandle g_kernels = nullptr;

static HcclResult LoadKernels()
{
    if (g_kernels != nullptr) return HCCL_SUCCESS;
    Dl_info self;                               /* <vendor>/lib64/this.so -> <vendor>/aicpu/config/ */
    if (dladdr(reinterpret_cast<void*>(&LoadKernels), &self) == 0) return HCCL_E_INTERNAL;
    std::string json(self.dli_fname);
    json = json.substr(0, json.rfind('/')) + "/../aicpu/config/libhccl_demo_kernel.json";
    aclrtBinaryLoadOption option;
    option.type = ACL_RT_BINARY_LOAD_OPT_CPU_KERNEL_MODE;
    option.value.cpuKernelMode = 0;
    aclrtBinaryLoadOptions options = {&option, 1};
    ACL_CHK(aclrtBinaryLoadFromFile(json.c_str(), &options, &g_kernels));
    return HCCL_SUCCESS;
}

HcclResult DemoLaunch(const char* name, const void* args, size_t size, ThreadHandle hostThread,
                      ThreadHandle kernelThread, aclrtStream stream)
{
    CHK(LoadKernels());
    aclrtFuncHandle kernel;
    aclrtArgsHandle packed;
    aclrtParamHandle param;
    ACL_CHK(aclrtBinaryGetFunction(g_kernels, name, &kernel));
    ACL_CHK(aclrtKernelArgsInit(kernel, &packed));
    ACL_CHK(aclrtKernelArgsAppend(packed, const_cast<void*>(args), size, &param));
    ACL_CHK(aclrtKernelArgsFinalize(packed));
    aclrtLaunchKernelAttr attr;
    attr.id = ACL_RT_LAUNCH_KERNEL_ATTR_TIMEOUT;
    attr.value.timeout = DEMO_TIMEOUT_S;
    aclrtLaunchKernelCfg cfg = {&attr, 1};
    /* The stream: the kernel (it only issues its thread's tasks, which first wait for the go), then in one batch
     * the go and the wait for its done.  Recording the go before the launch works too, but leaves a notify set
     * on an idle rank for a moment, which the strict checker reports. */
    ACL_CHK(aclrtLaunchKernelWithConfig(kernel, 1, stream, &cfg, packed, nullptr));
    CHK(HcommBatchModeStart(DEMO_TAG));
    CHK(HcommThreadNotifyRecordOnThread(hostThread, kernelThread, 0));
    CHK(HcommThreadNotifyWaitOnThread(hostThread, 0, DEMO_TIMEOUT_S));
    CHK(HcommBatchModeEnd(DEMO_TAG));
    return HCCL_SUCCESS;
}
