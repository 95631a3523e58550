# FindCUDNN: locate cuDNN (headers and libcudnn) for the cudnn backend.
#
# Honours CUDNN_ROOT (CMake variable or environment variable), which may point
# at a cuDNN tree with include/ and lib/ (for example the nvidia/cudnn folder of
# a PyTorch wheel, whose lib/ has only versioned libcudnn.so.9). Falls back to
# the CUDA toolkit and the system paths.
#
# Defines CUDNN_FOUND, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY, CUDNN_VERSION and the
# imported target CUDNN::cudnn.
set(_cudnn_hints "")
if(CUDNN_ROOT)
  list(APPEND _cudnn_hints ${CUDNN_ROOT})
endif()
if(DEFINED ENV{CUDNN_ROOT})
  list(APPEND _cudnn_hints $ENV{CUDNN_ROOT})
endif()
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _cudnn_hints ${CUDAToolkit_LIBRARY_ROOT})
endif()

find_path(CUDNN_INCLUDE_DIR cudnn_version.h
          HINTS ${_cudnn_hints} PATH_SUFFIXES include
          ${CUDAToolkit_INCLUDE_DIRS})
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR
             HINTS ${_cudnn_hints} PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)

if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(READ "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_version_h)
  string(REGEX MATCH "define CUDNN_MAJOR ([0-9]+)" _ ${_cudnn_version_h})
  set(_major ${CMAKE_MATCH_1})
  string(REGEX MATCH "define CUDNN_MINOR ([0-9]+)" _ ${_cudnn_version_h})
  set(_minor ${CMAKE_MATCH_1})
  string(REGEX MATCH "define CUDNN_PATCHLEVEL ([0-9]+)" _ ${_cudnn_version_h})
  set(_patch ${CMAKE_MATCH_1})
  set(CUDNN_VERSION "${_major}.${_minor}.${_patch}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN
  REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR
  VERSION_VAR CUDNN_VERSION)

if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES
    IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
  get_filename_component(_cudnn_libdir "${CUDNN_LIBRARY}" DIRECTORY)
  set_property(TARGET CUDNN::cudnn APPEND PROPERTY INTERFACE_LINK_OPTIONS "LINKER:-rpath,${_cudnn_libdir}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
