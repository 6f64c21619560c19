# service/embed_files.cmake - writes the dashboard's files (FILES, a
# ;-separated list of paths) into a C source as a table of
# struct api_static_file (api/static.h), named NAME:
#   cmake -DFILES="a.html;b.js" -DOUT=dashboard_files.c -DNAME=svc_dashboard_files
#         -P embed_files.cmake
set(body "")
set(table "")
set(i 0)
foreach(path IN LISTS FILES)
  get_filename_component(name "${path}" NAME)
  file(READ "${path}" hex HEX)
  string(LENGTH "${hex}" digits)
  math(EXPR bytes "${digits} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f])"
         "\\1\n" hex "${hex}")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
  string(APPEND body "/* ${name} */\nstatic const unsigned char file_${i}[] = {\n${hex}0x00\n};\n\n")
  string(APPEND table "\t{ \"${name}\", file_${i}, ${bytes} },\n")
  math(EXPR i "${i} + 1")
endforeach()
file(WRITE "${OUT}.tmp"
     "/* generated from service/dashboard/ by service/embed_files.cmake; do not edit */\n"
     "#include \"service/dashboard_files.h\"\n\n${body}"
     "const struct api_static_file ${NAME}[] = {\n${table}\t{ 0, 0, 0 }\n};\n"
     "const size_t ${NAME}_count = ${i};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
