// The emulated "npu" device: torch's PrivateUse1 backed by the hcomm emulator.
//
// What torch needs from an out-of-tree device, as its own OpenReg example provides it (pytorch
// test/cpp_extensions/open_registration_extension/torch_openreg: csrc/runtime/OpenRegGuard.h for the guard,
// OpenRegDeviceAllocator.cpp for the allocator, OpenRegHooks.h for the hooks, csrc/aten/OpenRegMinimal.cpp
// for the minimal kernel set and the boxed CPU fallback):
//   * a device guard (device count, current device per thread, streams, events),
//   * an allocator: every byte comes from the emulator's aclrtMalloc (through hooks Python installs), so the
//     package and the emulator see these tensors as device memory, as they see torch_npu's on CANN,
//   * PrivateUse1 hooks (availability, generator, pinned memory = aclrtMallocHost, storage resizing),
//   * the kernels that create and view storage, and a boxed fallback that runs torch's CPU kernel on the
//     device memory itself (the emulated device's memory is this process's memory): no operand is copied.
// Streams and events of torch.npu are the emulator's ACL streams and events, kept on the Python side; every
// kernel here runs synchronously on the calling thread, so the guard's stream is the default stream and its
// event calls have nothing to wait for.
// torch/library.h and the pybind casters rather than torch/extension.h: the C++ frontend that one adds
// (torch/all.h) is not used here and took a third of the first build's time (30 s -> 18 s on 2 cores).
#include <torch/library.h>
#include <torch/csrc/utils/pybind.h>

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>

namespace hcomm_npu {

using c10::Device;
using c10::DeviceIndex;
using c10::DeviceType;

// ------------------------------------------------------------------ memory hooks (set from Python)
// void *malloc(size_t nbytes, int device, int host); void free(void *ptr, int device, int host)
using MallocFn = void* (*)(size_t, int, int);
using FreeFn = void (*)(void*, int, int);
std::atomic<MallocFn> g_malloc{nullptr};
std::atomic<FreeFn> g_free{nullptr};
std::atomic<int> g_device_count{1};
thread_local DeviceIndex t_current = 0;   // this thread's device while ACL has none (or the hooks are gone)

// ACL's current device of the calling thread (aclrtGetDevice / aclrtSetDevice of the emulator): torch's current npu
// is ACL's, as torch_npu's is, so hcomm.set_device(n) and torch.npu.set_device(n) are one setting
using GetDeviceFn = int (*)();
using SetDeviceFn = int (*)(int);
std::atomic<GetDeviceFn> g_acl_get_device{nullptr};
std::atomic<SetDeviceFn> g_acl_set_device{nullptr};
// the emulator's count of device changes (any thread); while it stands still this thread's answer stands
std::atomic<const volatile uint64_t*> g_device_changes{nullptr};
thread_local uint64_t t_seen_changes = ~uint64_t(0);
thread_local bool t_acl_has_device = false;   // ACL's answer was a device (not "none set on this thread")

std::mutex g_pinned_lock;
std::map<uintptr_t, size_t> g_pinned;   // aclrtMallocHost blocks: start -> size

// The hooks are Python (cffi callbacks): called with the GIL held and any pending Python error set aside
// (a tensor freed while torch is raising an error would otherwise make the callback fail)
// Python's hooks are callable until the interpreter starts finalizing; after that, a freed block goes with the process
bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

struct PythonCall {
  pybind11::gil_scoped_acquire gil;
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
  PythonCall() { PyErr_Fetch(&type, &value, &traceback); }
  ~PythonCall() { PyErr_Restore(type, value, traceback); }
};

void* raw_malloc(size_t nbytes, DeviceIndex device, bool host) {
  MallocFn fn = g_malloc.load();
  TORCH_CHECK(fn != nullptr && python_alive(), "the emulated npu device is shut down (the interpreter is exiting) "
              "or not set up; cannot allocate ", nbytes, " bytes");
  void* p = nullptr;
  {
    PythonCall call;
    p = fn(nbytes, static_cast<int>(device), host ? 1 : 0);
  }
  TORCH_CHECK(p != nullptr, "npu out of memory: the emulator's ", host ? "aclrtMallocHost" : "aclrtMalloc",
              " of ", nbytes, " bytes failed (see the Python warning above for its message)");
  return p;
}

void raw_free(void* p, DeviceIndex device, bool host) {
  FreeFn fn = g_free.load();
  if (fn != nullptr && p != nullptr && python_alive()) {
    PythonCall call;
    fn(p, static_cast<int>(device), host ? 1 : 0);
  }  // else: the interpreter is exiting; the process's memory goes with it
}

DeviceIndex current() {
  GetDeviceFn fn = g_acl_get_device.load();
  const volatile uint64_t* changes = g_device_changes.load();
  const uint64_t now = changes != nullptr ? *changes : ~uint64_t(0);
  if (changes != nullptr && now == t_seen_changes) return t_current;
  if (fn != nullptr && python_alive()) {
    int index;
    {
      PythonCall call;
      index = fn();
    }
    if (index >= 0) t_current = static_cast<DeviceIndex>(index);   // < 0: ACL has no device on this thread yet
    t_acl_has_device = index >= 0;
    t_seen_changes = now;
  }
  return t_current;
}

void make_current(DeviceIndex index) {
  if (index == current() && (t_acl_has_device || g_acl_set_device.load() == nullptr)) return;
  SetDeviceFn fn = g_acl_set_device.load();
  if (fn != nullptr && python_alive()) {
    int rc;
    {
      PythonCall call;
      rc = fn(static_cast<int>(index));
    }
    TORCH_CHECK(rc == 0, "aclrtSetDevice(", static_cast<int>(index), ") of the emulator failed with ", rc);
    // this thread's own change: its answer is index (changes of other threads move their devices, not this one's)
    const volatile uint64_t* changes = g_device_changes.load();
    if (changes != nullptr) t_seen_changes = *changes;
    t_acl_has_device = true;
  }
  t_current = index;
}

// ------------------------------------------------------------------ the device allocator
// Blocks come from the emulator's aclrtMalloc and, freed, wait in a cache for a request of the same rounded size
// (as torch_npu's caching allocator keeps them), so a training step does not call into Python per tensor; the
// cache holds at most kCacheLimit bytes, and torch.npu.empty_cache() hands it all back to aclrtFree.
constexpr size_t kRound = 512;
constexpr size_t kCacheLimit = size_t(256) << 20;

struct BlockCache {
  std::mutex lock;
  std::multimap<std::pair<DeviceIndex, size_t>, void*> free;   // (device, rounded size) -> block
  size_t bytes = 0;

  void* take(DeviceIndex device, size_t size) {
    std::lock_guard<std::mutex> guard(lock);
    auto it = free.find({device, size});
    if (it == free.end()) return nullptr;
    void* p = it->second;
    free.erase(it);
    bytes -= size;
    return p;
  }
  bool keep(DeviceIndex device, size_t size, void* p) {
    std::lock_guard<std::mutex> guard(lock);
    if (bytes + size > kCacheLimit || g_free.load() == nullptr || !python_alive()) return false;
    free.emplace(std::make_pair(device, size), p);
    bytes += size;
    return true;
  }
  std::vector<std::pair<void*, DeviceIndex>> drain() {
    std::lock_guard<std::mutex> guard(lock);
    std::vector<std::pair<void*, DeviceIndex>> out;
    for (auto& [key, p] : free) out.emplace_back(p, key.first);
    free.clear();
    bytes = 0;
    return out;
  }
};
BlockCache g_cache;

struct NpuAllocator final : c10::Allocator {
  struct Block { void* ptr; DeviceIndex device; size_t size; };   // the deleter's context
  static void deleter(void* ctx) {
    auto* blk = static_cast<Block*>(ctx);
    if (!g_cache.keep(blk->device, blk->size, blk->ptr)) raw_free(blk->ptr, blk->device, false);
    delete blk;
  }
  static c10::DataPtr block(size_t nbytes, DeviceIndex device, Device as) {
    const size_t size = (nbytes + kRound - 1) / kRound * kRound;
    void* p = g_cache.take(device, size);
    if (p == nullptr) p = raw_malloc(size, device, false);
    return c10::DataPtr(p, new Block{p, device, size}, &NpuAllocator::deleter, as);
  }

  c10::DataPtr allocate(size_t nbytes) override {
    DeviceIndex device = current();
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, Device(DeviceType::PrivateUse1, device));
    }
    return block(nbytes, device, Device(DeviceType::PrivateUse1, device));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};
NpuAllocator g_allocator;

// pinned host memory: the emulator's aclrtMallocHost (CPU tensors, as torch_npu's pin_memory gives)
struct PinnedAllocator final : c10::Allocator {
  static void deleter(void* ctx) {
    {
      std::lock_guard<std::mutex> lock(g_pinned_lock);
      g_pinned.erase(reinterpret_cast<uintptr_t>(ctx));
    }
    raw_free(ctx, -1, true);
  }
  c10::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, Device(DeviceType::CPU));
    }
    void* p = raw_malloc(nbytes, -1, true);
    {
      std::lock_guard<std::mutex> lock(g_pinned_lock);
      g_pinned[reinterpret_cast<uintptr_t>(p)] = nbytes;
    }
    return c10::DataPtr(p, p, &PinnedAllocator::deleter, Device(DeviceType::CPU));
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};
PinnedAllocator g_pinned_allocator;

bool is_pinned(const void* data) {
  auto addr = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(g_pinned_lock);
  auto it = g_pinned.upper_bound(addr);
  if (it == g_pinned.begin()) return false;
  --it;
  return addr < it->first + it->second;
}

// ------------------------------------------------------------------ the device guard
void check_index(DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < g_device_count.load(), "npu:", static_cast<int>(index),
              " is not a device of the emulator: it has ", g_device_count.load(),
              " (HCOMM_SIM_DEVICE_COUNT)");
}

struct NpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return DeviceType::PrivateUse1; }
  Device exchangeDevice(Device d) const override {
    Device old = getDevice();
    if (d.index() >= 0 && d.index() != old.index()) setDevice(d);
    return old;
  }
  Device getDevice() const override { return Device(DeviceType::PrivateUse1, current()); }
  void setDevice(Device d) const override {
    TORCH_CHECK(d.is_privateuseone(), "expected an npu device, got ", d);
    if (d.index() >= 0) {
      check_index(d.index());
      if (d.index() != current()) make_current(d.index());
    }
  }
  void uncheckedSetDevice(Device d) const noexcept override {
    if (d.index() < 0) return;
    try {
      make_current(d.index());
    } catch (...) {
      t_current = d.index();   // noexcept: torch restores a guard's device here; ACL keeps what it had
    }
  }
  c10::Stream getStream(Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, Device(DeviceType::PrivateUse1, d.index() < 0 ? current() : d.index()));
  }
  c10::Stream getDefaultStream(Device d) const override { return getStream(d); }
  c10::Stream getNewStream(Device d, int priority = 0) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(Device d, bool isHighPriority = false) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return getStream(s.device()); }
  DeviceIndex deviceCount() const noexcept override { return static_cast<DeviceIndex>(g_device_count.load()); }
  // kernels run synchronously on the calling thread: an event is complete when recorded
  void record(void** event, const c10::Stream& stream, const DeviceIndex device_index,
              const c10::EventFlag flag) const override {}
  void block(void* event, const c10::Stream& stream) const override {}
  bool queryEvent(void* event) const override { return true; }
  void destroyEvent(void* event, const DeviceIndex device_index) const noexcept override {}
  bool queryStream(const c10::Stream& stream) const override { return true; }
  void synchronizeStream(const c10::Stream& stream) const override {}
  void synchronizeEvent(void* event) const override {}
  void synchronizeDevice(const DeviceIndex device_index) const override {}
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {}
  double elapsedTime(void* event1, void* event2, const DeviceIndex device_index) const override { return 0.0; }
};

// ------------------------------------------------------------------ random numbers
// Each npu device has its own default generator, as torch_npu's devices do (torch.npu.manual_seed seeds the
// current device's, manual_seed_all every device's, torch.manual_seed the CPU's and every device's).  They are CPU
// generators (the CPU kernels that draw the numbers accept no other), kept apart from torch's CPU default
// generator: npu tensors draw from their device's generator, CPU tensors from the CPU's.
std::mutex g_generators_mutex;
std::map<DeviceIndex, at::Generator> g_generators;   // a map: references stay valid as devices are added

const at::Generator& default_generator(DeviceIndex index) {
  if (index < 0) index = current();
  check_index(index);
  std::lock_guard<std::mutex> lock(g_generators_mutex);
  auto found = g_generators.find(index);
  if (found == g_generators.end()) found = g_generators.emplace(index, at::detail::createCPUGenerator()).first;
  return found->second;
}

// ------------------------------------------------------------------ hooks
struct NpuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  const at::Generator& getDefaultGenerator(DeviceIndex device_index) const override {
    return default_generator(device_index);
  }
  at::Generator getNewGenerator(DeviceIndex device_index = -1) const override {
    return at::detail::createCPUGenerator();
  }
  Device getDeviceFromPtr(void* data) const override { return Device(DeviceType::PrivateUse1, current()); }
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  bool hasPrimaryContext(DeviceIndex device_index) const override { return true; }
  DeviceIndex deviceCount() const override { return static_cast<DeviceIndex>(g_device_count.load()); }
  void setCurrentDevice(DeviceIndex device) const override { check_index(device); make_current(device); }
  DeviceIndex getCurrentDevice() const override { return current(); }
  DeviceIndex exchangeDevice(DeviceIndex device) const override {
    DeviceIndex old = current();
    if (device >= 0 && device != old) { check_index(device); make_current(device); }
    return old;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex device) const override { return exchangeDevice(device); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    // the storage's own allocator is this device's: new block, old bytes copied, old block freed
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), newsize);
  }
};

// ------------------------------------------------------------------ kernels that make or view storage
constexpr c10::DispatchKeySet kNpuKeys(c10::DispatchKey::PrivateUse1);

Device target_device(std::optional<Device> device_opt) {
  if (!device_opt) return Device(DeviceType::PrivateUse1, current());
  Device device = *device_opt;
  TORCH_CHECK(device.is_privateuseone(), "expected an npu device, got ", device);
  return device.has_index() ? device : Device(DeviceType::PrivateUse1, current());
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "the emulated npu device has strided tensors only; got layout ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "pin_memory=True is for CPU tensors, not npu ones");
  const c10::DeviceGuard guard(target_device(device));
  return at::detail::empty_generic(size, &g_allocator, kNpuKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<Device> device,
                         std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "the emulated npu device has strided tensors only; got layout ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "pin_memory=True is for CPU tensors, not npu ones");
  const c10::DeviceGuard guard(target_device(device));
  return at::detail::empty_strided_generic(size, stride, &g_allocator, kNpuKeys, c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  return at::cpu::as_strided_symint(self, size, stride, std::move(storage_offset));
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(self.device());
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

// a CPU tensor over the same bytes as an npu tensor (no copy; the npu tensor keeps the memory alive)
at::Tensor cpu_view(const at::Tensor& t) {
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor src_cpu = self.is_privateuseone() ? cpu_view(self) : self;
  at::Tensor dst_cpu = dst.is_privateuseone() ? cpu_view(dst) : dst;
  TORCH_CHECK(src_cpu.is_cpu() && dst_cpu.is_cpu(), "copy between ", self.device(), " and ", dst.device(),
              " is not supported by the emulated npu device (npu and cpu only)");
  at::native::copy_(dst_cpu, src_cpu, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::native::_local_scalar_dense_cpu(cpu_view(self));
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  return at::native::set_(self, source);
}

at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage storage, int64_t offset, c10::IntArrayRef size,
                                      c10::IntArrayRef stride) {
  return at::cpu::set_(self, storage, offset, size, stride);
}

// `tensor.data = other` (and nn.Module._apply, FSDP2's _move_states_to_device) between a CPU tensor and an npu
// tensor.  torch allows the swap only between its own dense backends (c10/core/TensorImpl.h,
// has_compatible_shallow_copy_type) and leaves PrivateUse1 devices to say; torch_npu allows CPU <-> npu
// (Ascend/torch_npu csrc/aten/HasCompatibleShallowCopyType.cpp:10-26), and so does this device.  Both are plain
// strided TensorImpls here, so the metadata copy that follows is exact.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense_here = [](c10::DispatchKeySet keys) {
    return keys.has(c10::DispatchKey::CPU) || keys.has(c10::DispatchKey::PrivateUse1);
  };
  return self.key_set() == from.key_set() || (dense_here(self.key_set()) && dense_here(from.key_set()));
}

// dropout on an npu tensor: torch routes it to native_dropout (aten/src/ATen/native/Dropout.cpp, dropout() with
// is_fused_kernel_acceptable), which has no generator argument, and its CPU kernel draws from the CPU default
// generator; here the mask is drawn from the device's generator.  Results as the CPU kernel's: a bool mask, the
// output input * mask / (1 - p) (0 where p == 1); not training, the input's copy and a mask of ones.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (input.numel() == 0) return std::make_tuple(input, at::empty_like(input));
  if (train.has_value() && !*train) {
    return std::make_tuple(input.clone(), at::ones_like(input, input.options().dtype(at::kBool)));
  }
  const double keep = 1.0 - p;
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool), c10::MemoryFormat::Contiguous);
  mask.bernoulli_(keep, default_generator(input.device().index()));
  return std::make_tuple(input.mul(mask).mul_(keep == 0 ? 0.0 : 1.0 / keep), mask);
}

// Tensor.record_stream: torch's caching allocators keep a block from reuse until the stream's work is done.  Here
// no kernel is ever pending (they run on the calling thread) and a block goes back to aclrtFree only when its
// last tensor dies; communication queued on a stream keeps its tensors alive itself (the backend's Work)
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == DeviceType::PrivateUse1, "record_stream of an npu tensor on a ", stream.device(),
              " stream; expected an npu stream");
}

// ------------------------------------------------------------------ the CPU fallback, in place on device memory
// Every npu tensor argument becomes a CPU tensor over the same storage bytes (one per npu storage, so two
// arguments sharing memory still share it); torch's CPU kernel runs on them; results that are arguments, or
// views of their storage, come back as the npu tensors / npu views they are; a result in fresh CPU memory is
// moved into npu memory (the one copy: CPU kernels allocate their outputs from the CPU allocator).
// CPU-facing storage over npu memory: what a CPU kernel allocates when it grows an out= argument of the
// fallback, so the grown storage is device memory too and goes back to the npu tensor without a copy
struct GrowAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    DeviceIndex device = current();
    if (nbytes == 0) return c10::DataPtr(nullptr, Device(DeviceType::CPU));
    return NpuAllocator::block(nbytes, device, Device(DeviceType::CPU));
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};
GrowAllocator g_grow_allocator;

struct Aliases {
  std::unordered_map<c10::StorageImpl*, std::pair<c10::Storage, at::Storage>> by_cpu;  // cpu impl -> (npu, cpu)
  std::unordered_map<c10::StorageImpl*, at::Storage> cpu_of_npu;
  std::unordered_map<c10::TensorImpl*, at::Tensor> npu_of_cpu;   // the CPU stand-in -> the npu argument
  std::vector<std::pair<at::Tensor, at::Tensor>> written;         // (npu argument, its CPU stand-in)
  std::optional<Device> device;

  at::Tensor to_cpu(const at::Tensor& t, bool write) {
    if (!t.defined() || !t.is_privateuseone()) return t;
    if (!device) device = t.device();
    c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
    auto found = cpu_of_npu.find(key);
    at::Storage cpu_storage;
    if (found == cpu_of_npu.end()) {
      // the bytes are the npu storage's (not owned here); a kernel that grows it gets npu memory (see settle)
      cpu_storage = at::Storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                                c10::DataPtr(t.storage().mutable_data(), Device(DeviceType::CPU)), &g_grow_allocator,
                                true);
      cpu_of_npu.emplace(key, cpu_storage);
      by_cpu.emplace(cpu_storage.unsafeGetStorageImpl(), std::make_pair(t.storage(), cpu_storage));
    } else {
      cpu_storage = found->second;
    }
    at::Tensor cpu = at::empty({0}, t.options().device(at::kCPU));
    cpu.set_(cpu_storage, t.storage_offset(), t.sizes(), t.strides());
    npu_of_cpu.emplace(cpu.unsafeGetTensorImpl(), t);
    if (write) written.emplace_back(t, cpu);
    return cpu;
  }

  // after the kernel: storages it grew hand their new npu block to the npu storage, and out= arguments it
  // reshaped take their new shape
  void settle() {
    for (auto& [cpu_impl, pair] : by_cpu) {
      c10::Storage& npu = pair.first;
      if (cpu_impl->data() != npu.data() || cpu_impl->nbytes() != npu.nbytes()) {
        c10::DataPtr grown = cpu_impl->set_data_ptr(c10::DataPtr(nullptr, Device(DeviceType::CPU)));
        grown.unsafe_set_device(npu.device());
        npu.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(grown));
        npu.unsafeGetStorageImpl()->set_nbytes(cpu_impl->nbytes());
        cpu_impl->set_data_ptr_noswap(c10::DataPtr(npu.mutable_data(), Device(DeviceType::CPU)));
      }
    }
    for (auto& [npu, cpu] : written) {
      if (npu.sizes() != cpu.sizes() || npu.strides() != cpu.strides() ||
          npu.storage_offset() != cpu.storage_offset()) {
        npu.unsafeGetTensorImpl()->set_sizes_and_strides(cpu.sizes(), cpu.strides(), cpu.storage_offset());
      }
    }
  }

  const char* op = "";

  at::Tensor to_npu(const at::Tensor& r) {
    if (!r.defined() || !r.is_cpu()) return r;
    TORCH_CHECK(r.layout() == c10::Layout::Strided, op, " on an npu tensor gives a ", r.layout(),
                " tensor: the emulated npu device has strided tensors only");
    auto same = npu_of_cpu.find(r.unsafeGetTensorImpl());
    if (same != npu_of_cpu.end()) return same->second;
    auto shared = by_cpu.find(r.storage().unsafeGetStorageImpl());
    if (shared != by_cpu.end()) {   // a view of an argument's memory: the same view of the npu storage
      at::Tensor v = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(shared->second.first), kNpuKeys,
                                                               r.dtype());
      v.unsafeGetTensorImpl()->set_sizes_and_strides(r.sizes(), r.strides(), r.storage_offset());
      return v;
    }
    const c10::DeviceGuard guard(device.value_or(Device(DeviceType::PrivateUse1, current())));
    at::Tensor out = empty_strided(r.sizes(), r.strides(), r.scalar_type(), std::nullopt, std::nullopt, std::nullopt);
    if (r.numel() > 0) cpu_view(out).copy_(r);
    return out;
  }
};

bool is_optional_generator(const c10::Argument& arg) {
  const auto optional = arg.type()->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

bool mutated(const c10::FunctionSchema& schema, size_t i) {
  const auto& alias = schema.arguments()[i].alias_info();
  return alias != nullptr && alias->isWrite();
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t base = stack->size() - nargs;
  Aliases aliases;
  aliases.op = schema.name().c_str();
  std::optional<size_t> generator_slot;   // a Generator? argument left None: the device's generator, not the CPU's
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = (*stack)[base + i];
    if (v.isNone() && is_optional_generator(schema.arguments()[i])) generator_slot = i;
    const bool write = mutated(schema, i);
    if (v.isTensor()) {
      v = aliases.to_cpu(v.toTensor(), write);
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : list) out.push_back(aliases.to_cpu(t, write));
      v = out;
    } else if (v.isOptionalTensorList()) {
      auto list = v.toOptionalTensorList();
      c10::List<std::optional<at::Tensor>> out;
      for (const std::optional<at::Tensor>& t : list) {
        out.push_back(t.has_value() ? std::optional<at::Tensor>(aliases.to_cpu(*t, write)) : std::nullopt);
      }
      v = out;
    } else if (v.isDevice() && v.toDevice().is_privateuseone()) {
      if (!aliases.device) aliases.device = v.toDevice();
      v = c10::IValue(Device(DeviceType::CPU));
    }
  }
  {
    const Device device = aliases.device.value_or(Device(DeviceType::PrivateUse1, current()));
    if (generator_slot) (*stack)[base + *generator_slot] = c10::IValue(default_generator(device.index()));
    const c10::DeviceGuard guard(device);
    op.callBoxed(stack);
  }
  aliases.settle();
  const size_t nret = schema.returns().size();
  const size_t rbase = stack->size() - nret;
  for (size_t i = 0; i < nret; ++i) {
    c10::IValue& v = (*stack)[rbase + i];
    if (v.isTensor()) {
      v = aliases.to_npu(v.toTensor());
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : list) out.push_back(aliases.to_npu(t));
      v = out;
    }
  }
}

// ------------------------------------------------------------------ Python-facing setup
NpuGuardImpl g_guard;
NpuHooks* g_hooks = nullptr;

void set_memory_hooks(uintptr_t malloc_fn, uintptr_t free_fn) {
  g_malloc.store(reinterpret_cast<MallocFn>(malloc_fn));
  g_free.store(reinterpret_cast<FreeFn>(free_fn));
}

void set_device_hooks(uintptr_t get_fn, uintptr_t set_fn, uintptr_t changes) {
  g_device_changes.store(reinterpret_cast<const volatile uint64_t*>(changes));
  g_acl_get_device.store(reinterpret_cast<GetDeviceFn>(get_fn));
  g_acl_set_device.store(reinterpret_cast<SetDeviceFn>(set_fn));
}

void set_device_count(int64_t n) {
  TORCH_CHECK(n >= 1 && n <= 1 << 15, "device count ", n, "; expected 1..32768");
  g_device_count.store(static_cast<int>(n));
}

void register_hooks() {
  if (g_hooks == nullptr) {
    g_hooks = new NpuHooks();
    at::RegisterPrivateUse1HooksInterface(g_hooks);
  }
}

int64_t current_device() { return current(); }

void empty_cache() {
  for (auto& [p, device] : g_cache.drain()) raw_free(p, device, false);
}

int64_t device_count() { return g_device_count.load(); }

at::Generator default_generator_of(int64_t index) { return default_generator(static_cast<DeviceIndex>(index)); }

void set_current_device(int64_t index) {
  check_index(static_cast<DeviceIndex>(index));
  make_current(static_cast<DeviceIndex>(index));
}

}  // namespace hcomm_npu

C10_REGISTER_GUARD_IMPL(PrivateUse1, hcomm_npu::NpuGuardImpl);
// what torch.UntypedStorage(n, device="npu") and at::GetAllocator(kPrivateUse1) use
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &hcomm_npu::g_allocator);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", hcomm_npu::empty_memory_format);
  m.impl("empty_strided", hcomm_npu::empty_strided);
  m.impl("as_strided", hcomm_npu::as_strided);
  m.impl("resize_", hcomm_npu::resize_);
  m.impl("_reshape_alias", hcomm_npu::reshape_alias);
  m.impl("view", hcomm_npu::view);
  m.impl("_copy_from", hcomm_npu::copy_from);
  m.impl("_copy_from_and_resize", hcomm_npu::copy_from_and_resize);
  m.impl("_local_scalar_dense", hcomm_npu::local_scalar_dense);
  m.impl("set_.source_Tensor", hcomm_npu::set_source_tensor);
  m.impl("set_.source_Storage", hcomm_npu::set_source_storage);
  m.impl("set_.source_Storage_storage_offset", hcomm_npu::set_source_storage_offset);
  m.impl("record_stream", hcomm_npu::record_stream);
  m.impl("_has_compatible_shallow_copy_type", hcomm_npu::has_compatible_shallow_copy_type);
  m.impl("native_dropout", hcomm_npu::native_dropout);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&hcomm_npu::fallback>());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("set_memory_hooks", &hcomm_npu::set_memory_hooks, "malloc/free function pointers (0, 0 to detach)");
  m.def("set_device_count", &hcomm_npu::set_device_count);
  m.def("set_device_hooks", &hcomm_npu::set_device_hooks, "aclrtGetDevice/aclrtSetDevice of this thread and the address of the emulator's device-change count (0: none)");
  m.def("register_hooks", &hcomm_npu::register_hooks);
  m.def("current_device", &hcomm_npu::current_device);
  m.def("device_count", &hcomm_npu::device_count);
  m.def("empty_cache", &hcomm_npu::empty_cache, "cached blocks back to aclrtFree");
  m.def("set_current_device", &hcomm_npu::set_current_device);
  m.def("default_generator", &hcomm_npu::default_generator_of,
        "the default generator of npu:index (-1: the current one)");
}
