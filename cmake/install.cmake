# cmake/install.cmake — `cmake --install BUILD --prefix DIR`: ctxlab as a library (docs/extending.md).
#   DIR/include/ctxlab/{ctxlab.h, core/, autograd/, nn/, posenc/, train/{,io,dist,cli}/}  public headers; the
#       library's own includes are "core/tensor.h"-style, so DIR/include/ctxlab is an include
#       directory of the package too
#   DIR/lib/libctxlab.a          ctxlab_lib, the same objects the CLI links (nothing rebuilt)
#   DIR/lib/libctxlab_cuda.so    the CUDA backend module, where built (dlopen()ed on first use)
#   DIR/bin/ctxlab               the CLI (finds DIR/lib/libctxlab_cuda.so through its RUNPATH)
#   DIR/lib/cmake/ctxlab/        ctxlabConfig.cmake + ctxlabConfigVersion.cmake
# The package config (cmake/ctxlabConfig.cmake.in) is written by hand rather than exported: the
# library must be linked whole and the executable's symbols exported (the CUDA module and the
# plugins bind to them), which the config spells out for the user's targets.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

foreach(dir core core/cpu autograd nn posenc train train/io train/dist train/cli)
  file(GLOB _hdrs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${dir}/*.h)  # a new header installs without a re-configure
  install(FILES ${_hdrs} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ctxlab/${dir})
endforeach()
install(FILES ${CMAKE_SOURCE_DIR}/include/ctxlab/ctxlab.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ctxlab)

install(FILES $<TARGET_FILE:ctxlab_lib> DESTINATION ${CMAKE_INSTALL_LIBDIR} RENAME libctxlab.a)
install(TARGETS ctxlab RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
set_target_properties(ctxlab PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
if(TARGET ctxlab_cuda)
  # keeps the RUNPATH to cudart / cuBLAS / NCCL outside the system directories
  set_target_properties(ctxlab_cuda PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS ctxlab_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  set(CTXLAB_PKG_CUDA_MODULE ON)
else()
  set(CTXLAB_PKG_CUDA_MODULE OFF)
endif()
# What the config needs to know about this build.
set(CTXLAB_PKG_REAL_CUDA OFF)
if(CTXLAB_WITH_CUDA AND NOT CTXLAB_CUDA_EMULATOR)
  set(CTXLAB_PKG_REAL_CUDA ON)
endif()
# the library's public definitions (CTXLAB_WITH_CUDA, ...), less the source tree's path
get_target_property(_defs ctxlab_lib INTERFACE_COMPILE_DEFINITIONS)
list(FILTER _defs EXCLUDE REGEX "^CTXLAB_SOURCE_DIR=")
string(JOIN ";" CTXLAB_PKG_DEFINITIONS ${_defs})
# a sanitizer build's library needs its users compiled and linked with the same flags
set(CTXLAB_PKG_SANITIZE "")
if(CTXLAB_SANITIZE)
  set(CTXLAB_PKG_SANITIZE "-fsanitize=address,undefined")
endif()
file(RELATIVE_PATH CTXLAB_PKG_UP "/${CMAKE_INSTALL_LIBDIR}/cmake/ctxlab" "/")
configure_file(${CMAKE_SOURCE_DIR}/cmake/ctxlabConfig.cmake.in ${CMAKE_BINARY_DIR}/ctxlabConfig.cmake @ONLY)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ctxlabConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ctxlabConfig.cmake ${CMAKE_BINARY_DIR}/ctxlabConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ctxlab)
