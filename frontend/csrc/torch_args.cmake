# _C_torch (torch_args.cpp): optional, built only when the Python that builds the
# binding imports a torch with C++ headers. It is tied to that exact torch version
# (checked when it is imported); without it tessera reads torch tensors through Python.
execute_process(
  COMMAND ${Python3_EXECUTABLE} -c [=[
import glob, os, sys
import torch
root = os.path.dirname(torch.__file__)
lib = os.path.join(root, "lib")
cuda_h = ""
if torch.version.cuda and os.path.exists(os.path.join(lib, "libc10_cuda.so")):
    # torch's CUDA stream header includes cuda_runtime_api.h: the toolkit's or a pip wheel's.
    cands = [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include")]
    for p in sys.path:
        cands += sorted(glob.glob(os.path.join(p, "nvidia", "*", "include")))
    cuda_h = next((c for c in cands if os.path.exists(os.path.join(c, "cuda_runtime_api.h"))), "")
print(str(torch.__version__), os.path.join(root, "include"), lib, int(torch._C._GLIBCXX_USE_CXX11_ABI), cuda_h, sep=";")
]=]
  OUTPUT_VARIABLE TESSERA_TORCH_INFO OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE TESSERA_TORCH_RC)
list(LENGTH TESSERA_TORCH_INFO TESSERA_TORCH_INFO_LEN)
if(NOT TESSERA_TORCH_RC EQUAL 0 OR NOT TESSERA_TORCH_INFO_LEN EQUAL 5)
  message(STATUS "_C_torch: not built (no torch in ${Python3_EXECUTABLE}); torch tensors are read through Python")
  return()
endif()
list(GET TESSERA_TORCH_INFO 0 TESSERA_TORCH_VERSION)
list(GET TESSERA_TORCH_INFO 1 TESSERA_TORCH_INCLUDE)
list(GET TESSERA_TORCH_INFO 2 TESSERA_TORCH_LIB)
list(GET TESSERA_TORCH_INFO 3 TESSERA_TORCH_CXX11_ABI)
list(GET TESSERA_TORCH_INFO 4 TESSERA_TORCH_CUDA_INCLUDE)
if(NOT EXISTS "${TESSERA_TORCH_INCLUDE}/torch/csrc/autograd/python_variable.h")
  message(STATUS "_C_torch: not built (torch ${TESSERA_TORCH_VERSION} has no C++ headers)")
  return()
endif()

Python3_add_library(_C_torch MODULE WITH_SOABI torch_args.cpp)
# torch's headers need C++20; they are system headers here so that -Wall stays about ours.
set_target_properties(_C_torch PROPERTIES CXX_STANDARD 20 CXX_VISIBILITY_PRESET hidden
                      INSTALL_RPATH "${TESSERA_TORCH_LIB}" BUILD_WITH_INSTALL_RPATH ON)
target_include_directories(_C_torch SYSTEM PRIVATE ${TESSERA_TORCH_INCLUDE})
target_compile_definitions(_C_torch PRIVATE TESSERA_TORCH_BUILD_VERSION="${TESSERA_TORCH_VERSION}"
                           _GLIBCXX_USE_CXX11_ABI=${TESSERA_TORCH_CXX11_ABI})
target_link_libraries(_C_torch PRIVATE ${TESSERA_TORCH_LIB}/libtorch_python.so ${TESSERA_TORCH_LIB}/libc10.so)
if(TESSERA_TORCH_CUDA_INCLUDE)
  target_include_directories(_C_torch SYSTEM PRIVATE ${TESSERA_TORCH_CUDA_INCLUDE})
  target_compile_definitions(_C_torch PRIVATE TESSERA_TORCH_CUDA_STREAM)
  target_link_libraries(_C_torch PRIVATE ${TESSERA_TORCH_LIB}/libc10_cuda.so)
  message(STATUS "_C_torch: torch ${TESSERA_TORCH_VERSION}, CUDA stream from ${TESSERA_TORCH_CUDA_INCLUDE}")
else()
  message(STATUS "_C_torch: torch ${TESSERA_TORCH_VERSION}, no CUDA stream reader")
endif()
install(TARGETS _C_torch LIBRARY DESTINATION tessera/_lib)
