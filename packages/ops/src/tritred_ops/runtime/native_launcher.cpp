// tritred's native replay of a recorded call plan: the outputs' allocation and the kernels' launches in one call.
//
// Why: a replayed call of a tiny reduction is host-bound. From Python, the allocation (torch.empty_strided,
// ~4 us) and Triton's launcher (argument parsing of ~30 objects, ~6 us) each cost about what torch's whole
// softmax call costs (docs/performance.md, "Latency"). Here both are C++ calls behind one Python call.
//
// What it does not decide: everything (the outputs' sizes and strides, the kernels, grids and every constant
// argument) comes from a plan the Python path recorded (tritred_ops/runtime/replay.py) and checked against the
// driver's own parameter layout (runtime/native.py); this file only fills in the call's pointers.
#include <Python.h>
#include <dlfcn.h>

#include <cstring>
#include <vector>

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/ScalarTypeToTypeMeta.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/object_ptr.h>

namespace {

// The CUDA driver API, declared here and resolved from libcuda at run time (as Triton's launcher does): no CUDA
// toolkit headers are needed to build this file.
using CUresult = int;
using CUfunction = void*;
using CUstream = void*;
using CUcontext = void*;
using CUdevice = int;
using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
using ErrorStringFn = CUresult (*)(CUresult, const char**);
using ParamInfoFn = CUresult (*)(CUfunction, size_t, size_t*, size_t*);
using CtxGetCurrentFn = CUresult (*)(CUcontext*);
using CtxSetCurrentFn = CUresult (*)(CUcontext);
using DeviceGetFn = CUresult (*)(CUdevice*, int);
using PrimaryCtxRetainFn = CUresult (*)(CUcontext*, CUdevice);

struct Driver {
  LaunchFn launch = nullptr;
  ErrorStringFn error_string = nullptr;
  ParamInfoFn param_info = nullptr;  // CUDA 12.4+ drivers
  CtxGetCurrentFn ctx_get_current = nullptr;
  CtxSetCurrentFn ctx_set_current = nullptr;
  DeviceGetFn device_get = nullptr;
  PrimaryCtxRetainFn primary_ctx_retain = nullptr;
};

const Driver* driver() {
  static Driver d = [] {
    Driver r;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      r.launch = reinterpret_cast<LaunchFn>(dlsym(lib, "cuLaunchKernel"));
      r.error_string = reinterpret_cast<ErrorStringFn>(dlsym(lib, "cuGetErrorString"));
      r.param_info = reinterpret_cast<ParamInfoFn>(dlsym(lib, "cuFuncGetParamInfo"));
      r.ctx_get_current = reinterpret_cast<CtxGetCurrentFn>(dlsym(lib, "cuCtxGetCurrent"));
      r.ctx_set_current = reinterpret_cast<CtxSetCurrentFn>(dlsym(lib, "cuCtxSetCurrent"));
      r.device_get = reinterpret_cast<DeviceGetFn>(dlsym(lib, "cuDeviceGet"));
      r.primary_ctx_retain = reinterpret_cast<PrimaryCtxRetainFn>(dlsym(lib, "cuDevicePrimaryCtxRetain"));
    }
    return r;
  }();
  const bool ok = d.launch != nullptr && d.param_info != nullptr && d.ctx_get_current != nullptr &&
                  d.ctx_set_current != nullptr && d.device_get != nullptr && d.primary_ctx_retain != nullptr;
  return ok ? &d : nullptr;
}

constexpr size_t kMaxParamBytes = 2048;  // a launch's packed parameters (Triton's kernels: a few hundred bytes)
constexpr size_t kMaxParams = 256;
constexpr size_t kMaxSlots = 64;

struct Output {
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype;
};

struct Launch {
  CUfunction function;
  unsigned grid[3];
  unsigned block_x;
  unsigned shared;
  std::vector<unsigned char> params;  // every parameter's bytes, each at an 8-byte aligned offset
  std::vector<uint32_t> offsets;      // where each parameter starts in params
  std::vector<std::pair<uint32_t, uint32_t>> patches;  // (offset in params, pointer slot) filled per call
};

struct Plan {
  c10::Device device{c10::DeviceType::CUDA, 0};
  Py_ssize_t n_inputs = 0;
  std::vector<Output> outputs;
  int64_t ws_bytes = 0;
  std::vector<int64_t> temp_offsets;  // the temporaries' offsets in the workspace (none start at zero: native.py)
  std::vector<Launch> launches;
};

const char* kCapsule = "tritred.native.Plan";

void free_plan(PyObject* capsule) { delete static_cast<Plan*>(PyCapsule_GetPointer(capsule, kCapsule)); }

// Whether libcuda was found with every entry point this file calls (else a RuntimeError is set).
bool usable_driver() {
  if (driver() != nullptr) return true;
  PyErr_SetString(PyExc_RuntimeError, "tritred native launcher: no libcuda.so.1 with cuLaunchKernel, "
                                      "cuFuncGetParamInfo (CUDA 12.4+) and the context calls");
  return false;
}

bool check_cuda(CUresult r, const char* what) {
  if (r == 0) return true;
  const char* msg = nullptr;
  if (driver()->error_string != nullptr) driver()->error_string(r, &msg);
  PyErr_Format(PyExc_RuntimeError, "tritred native launcher: %s failed: CUDA error %d (%s)", what, r,
               msg != nullptr ? msg : "unknown");
  return false;
}

// A sequence as a list or tuple (owned: released on every exit, error paths included).
THPObjectPtr fast_sequence(PyObject* seq, const char* what) {
  THPObjectPtr fast(PySequence_Fast(seq, what));
  if (!fast) throw python_error();
  return fast;
}

std::vector<int64_t> int_tuple(PyObject* seq) {
  std::vector<int64_t> r;
  THPObjectPtr fast = fast_sequence(seq, "expected a sequence of ints");
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()); ++i) {
    int64_t v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast.get(), i));
    if (v == -1 && PyErr_Occurred()) throw python_error();
    r.push_back(v);
  }
  return r;
}

// Make a context current on this thread where none is (as Triton's launcher does before each launch): torch sets
// the device of a new thread (autograd's device threads) without binding a context when it is already the current
// device. The plan's device's primary context: the one its kernels were loaded in (native.py checks that the plan
// was recorded with its device current).
bool ensure_context(c10::DeviceIndex index) {
  CUcontext current = nullptr;
  if (!check_cuda(driver()->ctx_get_current(&current), "cuCtxGetCurrent")) return false;
  if (current != nullptr) return true;
  CUdevice device = 0;
  CUcontext primary = nullptr;
  return check_cuda(driver()->device_get(&device, index), "cuDeviceGet") &&
         check_cuda(driver()->primary_ctx_retain(&primary, device), "cuDevicePrimaryCtxRetain") &&
         check_cuda(driver()->ctx_set_current(primary), "cuCtxSetCurrent");
}

// make_plan(device_index, n_inputs, outputs, ws_bytes, temp_offsets, launches) -> capsule
//   outputs: [(sizes, strides, torch.dtype)]; launches: [(function, (gx, gy, gz), block_x, shared, params bytes,
//   offsets, [(offset, slot)])]. Checked in Python (native.py); the bounds that guard memory are checked here.
PyObject* make_plan(PyObject*, PyObject* args) {
  HANDLE_TH_ERRORS
  long long device_index, n_inputs, ws_bytes;
  PyObject *outputs, *temp_offsets, *launches;
  if (!PyArg_ParseTuple(args, "LLOLOO", &device_index, &n_inputs, &outputs, &ws_bytes, &temp_offsets, &launches))
    return nullptr;
  if (!usable_driver()) return nullptr;
  auto plan = std::make_unique<Plan>();
  plan->device = c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index));
  plan->n_inputs = n_inputs;
  plan->ws_bytes = ws_bytes;
  plan->temp_offsets = int_tuple(temp_offsets);
  bool ok = n_inputs >= 0 && ws_bytes >= 0 && (plan->temp_offsets.empty() || ws_bytes > 0);
  for (int64_t o : plan->temp_offsets) ok = ok && o >= 0 && o < ws_bytes;
  if (!ok) {
    PyErr_SetString(PyExc_ValueError, "tritred native launcher: temporaries outside the workspace");
    return nullptr;
  }
  THPObjectPtr outs = fast_sequence(outputs, "outputs");
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(outs.get()); ++i) {
    PyObject *sizes, *strides, *dtype;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(outs.get(), i), "OOO!", &sizes, &strides, &THPDtypeType, &dtype))
      return nullptr;
    plan->outputs.push_back({int_tuple(sizes), int_tuple(strides), reinterpret_cast<THPDtype*>(dtype)->scalar_type});
  }
  const size_t n_slots = plan->n_inputs + plan->outputs.size() + plan->temp_offsets.size();
  if (n_slots > kMaxSlots) {
    PyErr_SetString(PyExc_ValueError, "tritred native launcher: too many pointer slots");
    return nullptr;
  }
  THPObjectPtr ls = fast_sequence(launches, "launches");
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(ls.get()); ++i) {
    unsigned long long function;
    unsigned gx, gy, gz, block_x, shared;
    Py_buffer params;
    PyObject *offsets, *patches;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(ls.get(), i), "K(III)IIy*OO", &function, &gx, &gy, &gz,
                          &block_x, &shared, &params, &offsets, &patches))
      return nullptr;
    Launch l;
    l.function = reinterpret_cast<CUfunction>(function);
    l.grid[0] = gx, l.grid[1] = gy, l.grid[2] = gz;
    l.block_x = block_x;
    l.shared = shared;
    l.params.assign(static_cast<unsigned char*>(params.buf), static_cast<unsigned char*>(params.buf) + params.len);
    PyBuffer_Release(&params);
    // (the packed parameters must match the kernel's: as many, each of the driver's size, inside the bytes)
    std::vector<int64_t> offsets_in = int_tuple(offsets);
    ok = gx > 0 && gy > 0 && gz > 0 && l.params.size() <= kMaxParamBytes && offsets_in.size() <= kMaxParams;
    for (size_t k = 0; ok && k < offsets_in.size(); ++k) {
      size_t driver_offset = 0, size = 0;
      ok = driver()->param_info(l.function, k, &driver_offset, &size) == 0 && offsets_in[k] >= 0 &&
           offsets_in[k] % 8 == 0 && offsets_in[k] + static_cast<int64_t>(size) <= static_cast<int64_t>(l.params.size());
      l.offsets.push_back(static_cast<uint32_t>(offsets_in[k]));
    }
    size_t past_offset = 0, past_size = 0;  // no parameter past the packed ones
    ok = ok && driver()->param_info(l.function, offsets_in.size(), &past_offset, &past_size) != 0;
    THPObjectPtr ps = fast_sequence(patches, "patches");
    for (Py_ssize_t k = 0; ok && k < PySequence_Fast_GET_SIZE(ps.get()); ++k) {
      std::vector<int64_t> p = int_tuple(PySequence_Fast_GET_ITEM(ps.get(), k));
      ok = p.size() == 2 && p[0] >= 0 && p[0] % 8 == 0 && p[0] + 8 <= static_cast<int64_t>(l.params.size()) &&
           p[1] >= 0 && p[1] < static_cast<int64_t>(n_slots);
      if (ok) l.patches.emplace_back(static_cast<uint32_t>(p[0]), static_cast<uint32_t>(p[1]));
    }
    if (!ok) {
      PyErr_SetString(PyExc_ValueError, "tritred native launcher: a launch's grid or parameters out of bounds");
      return nullptr;
    }
    plan->launches.push_back(std::move(l));
  }
  return PyCapsule_New(plan.release(), kCapsule, free_plan);
  END_HANDLE_TH_ERRORS
}

// An uninitialized tensor on the current CUDA device, made as torch's own empty_strided_cuda makes one (the CUDA
// allocator, the CUDA dispatch key) without a trip through the dispatcher (a few hundred ns of a tiny call). Where
// no CUDA allocator is registered, at::empty_strided. (torch's deterministic mode fills new tensors with NaN; a
// plan's kernels write every element of its outputs, and its workspace is scratch, so none is filled here.)
at::Tensor empty_cuda(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype,
                      const at::TensorOptions& options) {
  c10::Allocator* allocator = nullptr;
  try {
    allocator = c10::GetAllocator(c10::DeviceType::CUDA);
  } catch (const c10::Error&) {
    allocator = nullptr;
  }
  if (allocator == nullptr) return at::empty_strided(sizes, strides, options.dtype(dtype));
  return at::Tensor(at::detail::empty_strided_generic(sizes, strides, allocator,
                                                      c10::DispatchKeySet(c10::DispatchKey::CUDA), dtype));
}

// Whether `o` is a torch.Tensor (or a subclass) by its real type: THPVariable_Check is isinstance, which an object
// faking its __class__ passes, and such an object must never be unpacked as a tensor.
bool is_tensor(PyObject* o) { return PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(THPVariableClass)) != 0; }

// The plan's outputs for the call's inputs (tensors or None: an absent optional tensor, a null pointer, as the
// plan was recorded): allocate the outputs and the workspace, launch the plan's kernels on the current stream of
// the plan's device with the call's pointers.
PyObject* run_plan(const Plan* plan, PyObject* const* inputs, Py_ssize_t n_inputs) {
  if (n_inputs != plan->n_inputs) {
    PyErr_Format(PyExc_TypeError, "tritred native launcher: %zd inputs, the plan has %zd", n_inputs,
                 plan->n_inputs);
    return nullptr;
  }
  uint64_t pointers[kMaxSlots];
  size_t n = 0;
  for (Py_ssize_t i = 0; i < n_inputs; ++i) {
    PyObject* a = inputs[i];
    if (a == Py_None) {
      pointers[n++] = 0;
    } else if (is_tensor(a)) {
      pointers[n++] = reinterpret_cast<uint64_t>(THPVariable_Unpack(a).data_ptr());
    } else {
      PyErr_SetString(PyExc_TypeError, "tritred native launcher: inputs must be tensors or None");
      return nullptr;
    }
  }
  c10::DeviceGuard guard(plan->device);  // (a no-op when the plan's device is current)
  if (!ensure_context(plan->device.index())) return nullptr;
  const auto options = at::TensorOptions().device(plan->device);
  std::vector<at::Tensor> outs;
  outs.reserve(plan->outputs.size());
  for (const Output& o : plan->outputs) {
    outs.push_back(empty_cuda(o.sizes, o.strides, o.dtype, options));
    pointers[n++] = reinterpret_cast<uint64_t>(outs.back().data_ptr());
  }
  const c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(plan->device);
  auto* raw_stream = static_cast<CUstream>(stream.native_handle());
  at::Tensor ws;  // held until the launches are queued: the caching allocator orders its reuse on this stream
  if (plan->ws_bytes > 0) {
    ws = empty_cuda({plan->ws_bytes}, {1}, at::kByte, options);
    const auto base = reinterpret_cast<uint64_t>(ws.data_ptr());
    for (int64_t offset : plan->temp_offsets) pointers[n++] = base + offset;
  }
  alignas(8) unsigned char buffer[kMaxParamBytes];
  void* params[kMaxParams];
  for (const Launch& l : plan->launches) {
    std::memcpy(buffer, l.params.data(), l.params.size());
    for (const auto& [offset, slot] : l.patches) std::memcpy(buffer + offset, &pointers[slot], 8);
    for (size_t k = 0; k < l.offsets.size(); ++k) params[k] = buffer + l.offsets[k];
    if (!check_cuda(driver()->launch(l.function, l.grid[0], l.grid[1], l.grid[2], l.block_x, 1, 1, l.shared,
                                     raw_stream, params, nullptr), "cuLaunchKernel"))
      return nullptr;
  }
  PyObject* result = PyList_New(static_cast<Py_ssize_t>(outs.size()));
  if (result == nullptr) return nullptr;
  for (size_t k = 0; k < outs.size(); ++k) PyList_SET_ITEM(result, k, THPVariable_Wrap(std::move(outs[k])));
  return result;
}

// run(plan, *inputs) -> [outputs]: run_plan from Python (a plan replayed through replay.py's generated code).
PyObject* run(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs < 1 || !PyCapsule_CheckExact(args[0])) {
    PyErr_SetString(PyExc_TypeError, "run(plan, *inputs)");
    return nullptr;
  }
  auto* plan = static_cast<Plan*>(PyCapsule_GetPointer(args[0], kCapsule));
  if (plan == nullptr) return nullptr;
  return run_plan(plan, args + 1, nargs - 1);
  END_HANDLE_TH_ERRORS
}

// -- the plan key of a repeated call -------------------------------------------------------------------------------
//
// Why: computing a call's key in Python (replay.find_plan: shape, strides, dtype, device and alignment of each tensor
// as Python objects, then hashing them) costs about 1 us, a sixth of a tiny call. Here the same facts are packed
// into one bytes object. The key's form differs from find_plan's (a 5-tuple, find_plan's have 10 or more elements:
// the two never compare equal), so the plans of both live in one map; a call is keyed here whenever it can be, else
// (a tensor subclass, a negative-bit view, a tensor without storage, an argument that is not a plain scalar or a
// sequence of them) by find_plan, which also raises find_plan's errors.

// Appends `a`'s signature to `sig` (-1 for None); false for an argument this key does not take.
bool tensor_signature(PyObject* a, std::vector<int64_t>& sig) {
  if (a == Py_None) {
    sig.push_back(-1);
    return true;
  }
  if (!THPVariable_CheckExact(a)) return false;  // (a subclass may report other sizes: find_plan asks it)
  const at::Tensor& t = THPVariable_Unpack(a);
  if (t.layout() != at::kStrided || t.is_neg() || !t.has_storage()) return false;
  int64_t misalignment = 0;
  try {
    misalignment = static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16);
  } catch (const c10::Error&) {
    return false;
  }
  const int64_t ndim = t.dim();
  sig.push_back(ndim);
  for (int64_t d = 0; d < ndim; ++d) sig.push_back(t.sizes()[d]);
  for (int64_t d = 0; d < ndim; ++d) sig.push_back(t.strides()[d]);
  sig.push_back(static_cast<int64_t>(t.scalar_type()));
  sig.push_back(static_cast<int64_t>(t.device().type()));
  sig.push_back(t.device().index());
  sig.push_back(misalignment);
  return true;
}

// Whether `o`'s type is in `plain`; false (the error cleared) for a type that cannot be hashed: find_plan leaves
// such a call unkeyed too.
bool plain_type(PyObject* plain, PyObject* o) {
  const int r = PySet_Contains(plain, reinterpret_cast<PyObject*>(Py_TYPE(o)));
  if (r < 0) PyErr_Clear();
  return r > 0;
}

// `a` as the key holds it: a plain scalar (its type in `plain`) as is; a tuple, list or torch.Size of plain scalars as
// (type, element types, tuple); nullptr with no error set for anything else.
PyObject* key_argument(PyObject* plain, PyObject* a) {
  if (plain_type(plain, a)) {
    Py_INCREF(a);
    return a;
  }
  if (!PyTuple_CheckExact(a) && !PyList_CheckExact(a) && Py_TYPE(a) != &THPSizeType) return nullptr;
  THPObjectPtr items(PySequence_Tuple(a));
  if (!items) return nullptr;
  const Py_ssize_t n = PyTuple_GET_SIZE(items.get());
  THPObjectPtr types(PyTuple_New(n));
  if (!types) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyTuple_GET_ITEM(items.get(), i);
    if (!plain_type(plain, item)) return nullptr;
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(item));
    Py_INCREF(type);
    PyTuple_SET_ITEM(types.get(), i, type);
  }
  return PyTuple_Pack(3, reinterpret_cast<PyObject*>(Py_TYPE(a)), types.get(), items.get());
}

// The key of op(args, *tensors): (op, the arguments' types, the arguments, the tensors' types, their signatures and
// the default dtype as bytes). Py_NotImplemented (a new reference) where find_plan must key the call.
PyObject* make_key(PyObject* plain, PyObject* op, PyObject* args, PyObject* const* tensors, Py_ssize_t n) {
  if (!PyTuple_CheckExact(args) || !PyAnySet_Check(plain)) Py_RETURN_NOTIMPLEMENTED;
  const Py_ssize_t na = PyTuple_GET_SIZE(args);
  THPObjectPtr types(PyTuple_New(na)), values(PyTuple_New(na)), tensor_types(PyTuple_New(n));
  if (!types || !values || !tensor_types) return nullptr;
  for (Py_ssize_t i = 0; i < na; ++i) {
    PyObject* a = PyTuple_GET_ITEM(args, i);
    PyObject* value = key_argument(plain, a);
    if (value == nullptr) {
      if (PyErr_Occurred()) return nullptr;
      Py_RETURN_NOTIMPLEMENTED;
    }
    PyTuple_SET_ITEM(values.get(), i, value);
    Py_INCREF(Py_TYPE(a));
    PyTuple_SET_ITEM(types.get(), i, reinterpret_cast<PyObject*>(Py_TYPE(a)));
  }
  // (the default dtype is the result dtype of some calls: logsumexp of integers)
  std::vector<int64_t> sig{static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype()))};
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!tensor_signature(tensors[i], sig)) Py_RETURN_NOTIMPLEMENTED;
    Py_INCREF(Py_TYPE(tensors[i]));
    PyTuple_SET_ITEM(tensor_types.get(), i, reinterpret_cast<PyObject*>(Py_TYPE(tensors[i])));
  }
  THPObjectPtr bytes(PyBytes_FromStringAndSize(reinterpret_cast<const char*>(sig.data()),
                                               static_cast<Py_ssize_t>(sig.size() * sizeof(int64_t))));
  if (!bytes) return nullptr;
  return PyTuple_Pack(5, op, types.get(), values.get(), tensor_types.get(), bytes.get());
}

// The attribute names read on every replayed call, interned once (PyObject_GetAttrString makes a string per call).
struct Names {
  PyObject *native, *run, *launch_enter_hook, *launch_exit_hook, *calls, *current_level;
};

const Names& names() {
  static const Names n{PyUnicode_InternFromString("native"), PyUnicode_InternFromString("run"),
                       PyUnicode_InternFromString("launch_enter_hook"), PyUnicode_InternFromString("launch_exit_hook"),
                       PyUnicode_InternFromString("calls"), PyUnicode_InternFromString("_current_level")};
  return n;
}

// Whether a Triton launch hook (a profiler) is installed: `runtime` is triton.knobs.runtime; an empty HookChain
// (Triton 3.x's default) is no hook, as replay._hooks() reads it. -1 on error.
int hooked(PyObject* runtime) {
  for (PyObject* name : {names().launch_enter_hook, names().launch_exit_hook}) {
    THPObjectPtr hook(PyObject_GetAttr(runtime, name));
    if (!hook) return -1;
    if (hook.get() == Py_None) continue;
    THPObjectPtr calls(PyObject_GetAttr(hook.get(), names().calls));
    if (!calls) {
      if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
      PyErr_Clear();
      return 1;
    }
    const int active = PyObject_IsTrue(calls.get());
    if (active != 0) return active;
  }
  return 0;
}

// The outputs of the plan `plans` holds under the call's key, run here: natively where the plan has a native form
// and no launch hook is installed, else through its `run`. nullptr with no error set where `plans` holds none (then
// *key is the call's key, a new reference, or Py_NotImplemented where find_plan must key the call: make_key).
PyObject* find_and_run(PyObject* plans, PyObject* runtime, PyObject* plain, PyObject* op, PyObject* args,
                       PyObject* const* tensors, Py_ssize_t n, PyObject** key) {
  *key = nullptr;
  if (!PyDict_Check(plans)) {
    PyErr_SetString(PyExc_TypeError, "tritred native launcher: plans must be a dict");
    return nullptr;
  }
  THPObjectPtr k(make_key(plain, op, args, tensors, n));
  if (!k) return nullptr;
  if (k.get() == Py_NotImplemented) {
    *key = k.release();
    return nullptr;
  }
  PyObject* plan = PyDict_GetItemWithError(plans, k.get());  // (borrowed)
  if (plan == nullptr) {
    if (!PyErr_Occurred()) *key = k.release();
    return nullptr;
  }
  Py_INCREF(plan);
  THPObjectPtr held(plan);  // (a plan evicted by a nested call stays alive while it runs)
  THPObjectPtr native(PyObject_GetAttr(plan, names().native));
  if (!native) return nullptr;
  const int hook = PyCapsule_CheckExact(native.get()) ? hooked(runtime) : 1;
  if (hook < 0) return nullptr;
  if (hook == 0) {
    auto* p = static_cast<Plan*>(PyCapsule_GetPointer(native.get(), kCapsule));
    return p != nullptr ? run_plan(p, tensors, n) : nullptr;
  }
  THPObjectPtr run(PyObject_GetAttr(plan, names().run));
  return run ? PyObject_Vectorcall(run.get(), tensors, static_cast<size_t>(n), nullptr) : nullptr;
}

// What both entry points take first, bound once per plan map (native.py): the map, triton.knobs.runtime, the
// plain argument types, torch.autograd.forward_ad and torch._C._are_functorch_transforms_active.
struct Context {
  PyObject *plans, *runtime, *plain, *forward_ad, *functorch_active;  // (borrowed from the caller's tuple)
};

// `args` as (context, op, args, *tensors): false with a TypeError naming `what` for anything else.
bool unpack_context(PyObject* const* args, Py_ssize_t nargs, const char* what, Context& c) {
  if (nargs >= 3 && PyTuple_CheckExact(args[0]) &&
      PyArg_UnpackTuple(args[0], "context", 5, 5, &c.plans, &c.runtime, &c.plain, &c.forward_ad, &c.functorch_active))
    return true;
  if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s(context, op, args, *tensors)", what);
  return false;
}

// replay(context, op, args, *tensors) -> (outputs, None) where the context's plans hold the call's plan (run:
// find_and_run), else (None, key); NotImplemented where find_plan must key the call.
PyObject* replay(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  Context c;
  if (!unpack_context(args, nargs, "replay", c)) return nullptr;
  PyObject* key = nullptr;
  THPObjectPtr outputs(find_and_run(c.plans, c.runtime, c.plain, args[1], args[2], args + 3, nargs - 3, &key));
  if (outputs) return PyTuple_Pack(2, outputs.get(), Py_None);
  if (key == nullptr) return nullptr;  // (an error)
  THPObjectPtr k(key);
  if (key == Py_NotImplemented) return k.release();
  return PyTuple_Pack(2, Py_None, key);
  END_HANDLE_TH_ERRORS
}

// Whether the call needs its autograd Function, as checks.grad_needed decides: grad mode on and a tensor argument
// requiring grad, or a forward-AD level open (`forward_ad._current_level`), or a torch.func transform active
// (`functorch_active()`). -1 on error.
int grad_needed(PyObject* const* tensors, Py_ssize_t n, PyObject* forward_ad, PyObject* functorch_active) {
  if (c10::GradMode::is_enabled()) {
    for (Py_ssize_t i = 0; i < n; ++i)
      if (is_tensor(tensors[i]) && THPVariable_Unpack(tensors[i]).requires_grad()) return 1;
  }
  THPObjectPtr level(PyObject_GetAttr(forward_ad, names().current_level));
  if (!level) return -1;
  const long long l = PyLong_AsLongLong(level.get());
  if (l == -1 && PyErr_Occurred()) return -1;
  if (l >= 0) return 1;
  THPObjectPtr active(PyObject_CallNoArgs(functorch_active));
  return active ? PyObject_IsTrue(active.get()) : -1;
}

// replay_inference(context, op, args, *tensors) -> outputs or None:
// the saved plan of an inference call (one that needs no autograd Function: grad_needed) run, at the entry of a
// public op before its own Python layers; None for a call that needs its Function, has no key here, or no plan yet
// (the op's host path then decides, keys and records as it always does).
PyObject* replay_inference(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  Context c;
  if (!unpack_context(args, nargs, "replay_inference", c)) return nullptr;
  PyObject* const* tensors = args + 3;
  const Py_ssize_t n = nargs - 3;
  const int grad = grad_needed(tensors, n, c.forward_ad, c.functorch_active);
  if (grad < 0) return nullptr;
  if (grad) Py_RETURN_NONE;
  PyObject* key = nullptr;
  PyObject* outputs = find_and_run(c.plans, c.runtime, c.plain, args[1], args[2], tensors, n, &key);
  if (outputs != nullptr) return outputs;
  if (key == nullptr) return nullptr;  // (an error)
  Py_DECREF(key);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// param_sizes(function) -> (size of each kernel parameter): the driver's own layout of a loaded kernel, which
// native.py compares with the one it packed before a plan may launch through this file.
PyObject* param_sizes(PyObject*, PyObject* arg) {
  const unsigned long long function = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred()) return nullptr;
  if (!usable_driver()) return nullptr;
  PyObject* sizes = PyList_New(0);
  for (size_t i = 0; i < kMaxParams + 1; ++i) {
    size_t offset = 0, size = 0;
    if (driver()->param_info(reinterpret_cast<CUfunction>(function), i, &offset, &size) != 0) break;  // past the end
    PyObject* s = PyLong_FromSize_t(size);
    PyList_Append(sizes, s);
    Py_DECREF(s);
  }
  return sizes;
}

PyMethodDef methods[] = {
    {"make_plan", make_plan, METH_VARARGS, "make_plan(device_index, n_inputs, outputs, ws_bytes, temp_offsets, "
                                           "launches) -> plan"},
    {"run", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(run)), METH_FASTCALL,
     "run(plan, *inputs) -> list of outputs"},
    {"replay", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(replay)), METH_FASTCALL,
     "replay(context, op, args, *tensors) -> (outputs, None) | (None, key) | NotImplemented"},
    {"replay_inference", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(replay_inference)),
     METH_FASTCALL, "replay_inference(context, op, args, *tensors) -> outputs or None"},
    {"param_sizes", param_sizes, METH_O, "param_sizes(function) -> list of the kernel parameters' sizes"},
    {nullptr, nullptr, 0, nullptr}};

#define TRITRED_STR2(x) #x
#define TRITRED_STR(x) TRITRED_STR2(x)
#define TRITRED_CONCAT2(a, b) a##b
#define TRITRED_CONCAT(a, b) TRITRED_CONCAT2(a, b)

PyModuleDef module = {PyModuleDef_HEAD_INIT, TRITRED_STR(TORCH_EXTENSION_NAME), nullptr, -1, methods};

}  // namespace

// (torch.utils.cpp_extension names the module, with a version suffix when this file changes)
PyMODINIT_FUNC TRITRED_CONCAT(PyInit_, TORCH_EXTENSION_NAME)() { return PyModule_Create(&module); }
