# deploy/install.cmake - what `cmake --install build [--prefix P]` puts where,
# and the Debian package `cpack -G DEB` makes of it (docs/install.md).
# Included last by the top-level CMakeLists.txt, with GNUInstallDirs.
#
#   P/bin/                    larchd, larch, larch-train
#   P/<libdir>/larch/         liblarch_spec, _kernels, _trainer (+ _cuda): private,
#                             found through RUNPATH ($ORIGIN/../<libdir>/larch from
#                             bin, $ORIGIN among themselves); larch-train's GPU
#                             backend is loaded from beside liblarch_trainer.so
#   P/share/doc/larch/        README, docs/*.md, larchd.conf.example, examples/
#                             (the job specs), systemd/owner.conf (the owner-mode drop-in)
#   <sysconfdir>/larch/larchd.conf        the packaged settings (a conffile)
#   <sysconfdir>/logrotate.d/larchd
#   <unitdir>/larchd.service              ExecStart naming P/bin/larchd
#
# <sysconfdir> and <unitdir> follow the prefix given at install time, as
# GNUInstallDirs' rule for /usr: prefix /usr gives /etc and /lib/systemd/system
# (the package), any other prefix P/etc and P/lib/systemd/system
# (/usr/local/lib/systemd/system is on systemd's unit path too).
# larchd finds larch-train beside itself (service/main.c), so bin/ is all it needs.

file(RELATIVE_PATH LARCH_BIN_TO_LIB "${CMAKE_INSTALL_FULL_BINDIR}"
     "${CMAKE_INSTALL_FULL_LIBDIR}/larch")
set(LARCH_INSTALL_LIBDIR "${CMAKE_INSTALL_LIBDIR}/larch")

# the programs, and every shared library of ours in the folders they come
# from (a library added there later is installed without a word here)
set(LARCH_INSTALL_PROGRAMS larch-train)
foreach(t larchd larch)
  if(TARGET ${t})
    list(APPEND LARCH_INSTALL_PROGRAMS ${t})
  endif()
endforeach()
set(LARCH_INSTALL_LIBS "")
get_property(_dirs DIRECTORY ${PROJECT_SOURCE_DIR} PROPERTY SUBDIRECTORIES)
foreach(dir IN LISTS _dirs)
  if(dir MATCHES "/(kernels|trainer|db|api|service)$")
    get_property(_targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(t IN LISTS _targets)
      get_target_property(_type ${t} TYPE)
      if(_type STREQUAL "SHARED_LIBRARY")
        list(APPEND LARCH_INSTALL_LIBS ${t})
      endif()
    endforeach()
  endif()
endforeach()

set_target_properties(${LARCH_INSTALL_PROGRAMS} PROPERTIES
  INSTALL_RPATH "$ORIGIN/${LARCH_BIN_TO_LIB}")
set_target_properties(${LARCH_INSTALL_LIBS} PROPERTIES INSTALL_RPATH "$ORIGIN")
# the GPU backend also needs the CUDA toolkit's libraries (and NCCL) where
# the build found them, which need not be on the loader's path
if(LARCH_HAVE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(_cuda_rpath "$ORIGIN" "${CUDAToolkit_LIBRARY_DIR}")
  if(NCCL_LIBRARY)
    get_filename_component(_nccl_dir "${NCCL_LIBRARY}" DIRECTORY)
    list(APPEND _cuda_rpath "${_nccl_dir}")
  endif()
  list(REMOVE_DUPLICATES _cuda_rpath)
  foreach(t larch_trainer_cuda larch_kernels_cuda)
    if(TARGET ${t})
      set_target_properties(${t} PROPERTIES INSTALL_RPATH "${_cuda_rpath}")
    endif()
  endforeach()
endif()
install(TARGETS ${LARCH_INSTALL_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ${LARCH_INSTALL_LIBS} LIBRARY DESTINATION ${LARCH_INSTALL_LIBDIR})

install(FILES README.md docs/api.md docs/spec.md docs/trainer.md docs/install.md
              deploy/larchd.conf.example
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY trainer/examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples
        FILES_MATCHING PATTERN "*.json")
install(FILES deploy/systemd/owner.conf DESTINATION ${CMAKE_INSTALL_DOCDIR}/systemd)

# The files outside the prefix when it is /usr: placed at install time, when
# the prefix (cmake --install --prefix, cpack's) is known. file(INSTALL) adds
# DESTDIR and records them in install_manifest.txt.
set(LARCH_SRC "${PROJECT_SOURCE_DIR}")
set(_code [[
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(_etc "/etc")
    set(_units "/lib/systemd/system")
  else()
    set(_etc "${CMAKE_INSTALL_PREFIX}/etc")
    set(_units "${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
  endif()
  # the unit names /usr/bin/larchd and /etc/larch/larchd.conf: this prefix's
  file(READ "@LARCH_SRC@/deploy/systemd/larchd.service" _unit)
  string(REPLACE "/usr/bin/larchd" "${CMAKE_INSTALL_PREFIX}/@CMAKE_INSTALL_BINDIR@/larchd"
         _unit "${_unit}")
  string(REPLACE "/etc/larch/" "${_etc}/larch/" _unit "${_unit}")
  string(REPLACE "/usr/share/doc/larch/" "${CMAKE_INSTALL_PREFIX}/@CMAKE_INSTALL_DOCDIR@/"
         _unit "${_unit}")
  file(WRITE "@CMAKE_BINARY_DIR@/deploy-gen/larchd.service" "${_unit}")
  file(INSTALL "@CMAKE_BINARY_DIR@/deploy-gen/larchd.service" DESTINATION "${_units}"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  file(INSTALL "@LARCH_SRC@/deploy/systemd/larchd.conf" DESTINATION "${_etc}/larch"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  file(INSTALL "@LARCH_SRC@/deploy/logrotate/larchd" DESTINATION "${_etc}/logrotate.d"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
]])
string(CONFIGURE "${_code}" _code @ONLY)    # the @...@ known now; ${...} at install time
install(CODE "${_code}")

# ---- the Debian package: cpack -G DEB in the build dir --------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME larch)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "larch")
set(CPACK_PACKAGE_CONTACT "larch maintainers <larch@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Slurm-integrated service for large-batch training jobs")
set(CPACK_PACKAGE_DESCRIPTION
    "larchd (REST API, dashboard, SQLite, local and Slurm executors), the larch CLI\n\
and larch-train, a C trainer for large-batch data-parallel training.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)
# install with DESTDIR: the prefix the install code above sees is /usr, so
# the settings go to /etc and the unit to /lib/systemd/system
set(CPACK_SET_DESTDIR ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "/usr/${LARCH_INSTALL_LIBDIR}")
# beyond the linked libraries: BLAS is loaded at run time (kernels/blas.c),
# adduser makes the larch user (postinst)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "adduser, libopenblas0-openmp | libopenblas0-pthread | libblis4 | libblas3")
# the dashboard's charts; mpirun for jobs of several ranks on the local executor
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libjs-chart.js, openmpi-bin")
# the Slurm executor's commands; the data set the examples train on; logrotate
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "slurm-client, dataset-fashion-mnist, logrotate")
set(LARCH_DEB_CONTROL "${CMAKE_BINARY_DIR}/deploy-gen/debian")
foreach(f postinst prerm postrm conffiles)
  configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/${f} ${LARCH_DEB_CONTROL}/${f} COPYONLY)
  list(APPEND CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${LARCH_DEB_CONTROL}/${f})
endforeach()
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
