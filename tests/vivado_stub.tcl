# Stub Vivado commands for tclsh: each records its call (one line, fields separated by tabs) in the file named by
# the environment variable VTA_STUB_LOG and returns a handle the scripts pass on, so tests/test_vivado.py can
# read back the design a `vta hw vivado` script describes without Vivado. It knows nothing of Xilinx IP: it
# refuses only calls on cells never created and commands it does not define (tclsh's own "invalid command").
#
# Run as: tclsh tests/vivado_stub.tcl SCRIPT.tcl
# Environment: VTA_STUB_LOG (the record), VTA_STUB_BOARD_PARTS (a Tcl list of installed board part ids).

set ::stub_log [open $env(VTA_STUB_LOG) w]
set ::stub_board_parts [expr {[info exists env(VTA_STUB_BOARD_PARTS)] ? $env(VTA_STUB_BOARD_PARTS) : {}}]
set ::stub_cells [dict create]
set ::stub_dir [file join [file dirname [file normalize [lindex $argv 0]]] build stub]
set ::stub_bd ""

proc stub_record {args} {
  puts $::stub_log [join $args "\t"]
  flush $::stub_log
}

# flags with a value, then the positional arguments, of a call: returns {flags-dict positionals}
proc stub_parse {arglist} {
  set flags [dict create]
  set pos {}
  set n [llength $arglist]
  for {set i 0} {$i < $n} {incr i} {
    set a [lindex $arglist $i]
    if {[string match -* $a] && ![string is double -strict $a]} {
      if {$i + 1 < $n && ![string match -* [lindex $arglist [expr {$i + 1}]]]
          && $a ni {-quiet -force -norecurse -all -top -latest_file_version -import_files}} {
        dict set flags $a [lindex $arglist [incr i]]
      } else {
        dict set flags $a 1
      }
    } else {
      lappend pos $a
    }
  }
  return [list $flags $pos]
}

proc stub_cell_of {path} {
  set cell [lindex [split [string trimleft $path /] /] 0]
  if {![dict exists $::stub_cells $cell]} { error "stub: no cell '$cell' (in '$path')" }
  return $cell
}

# ---- projects and files
proc version {args} { return "stub" }
proc create_project {args} {
  lassign [stub_parse $args] f pos
  stub_record create_project [lindex $pos 0] [dict get $f -part]
  return project:[lindex $pos 0]
}
proc open_project {args} { stub_record open_project {*}$args; return project:open }
proc close_project {args} { stub_record close_project }
proc current_project {args} { return project:current }
proc current_fileset {args} { return fileset:sources_1 }
proc add_files {args} { lassign [stub_parse $args] f pos; stub_record add_files {*}[join $pos] }
proc update_compile_order {args} { return "" }
proc update_ip_catalog {args} { stub_record update_ip_catalog }
proc get_files {args} {
  lassign [stub_parse $args] f pos
  set name [lindex $pos end]
  if {[dict exists $f -of_objects]} {
    return [file join $::stub_dir $name]
  }
  return [file join $::stub_dir bd vta $name]
}
proc set_property {args} {
  lassign [stub_parse $args] f pos
  if {[dict exists $f -dict]} {
    foreach {k v} [dict get $f -dict] { stub_record set_property $k $v {*}$pos }
  } else {
    stub_record set_property [lindex $pos 0] [lindex $pos 1] {*}[lrange $pos 2 end]
  }
}
proc get_property {name obj} {
  switch -glob -- $name {
    NAME { return [lindex [split $obj :] end] }
    PROGRESS { return "100%" }
    DIRECTORY { return [file join $::stub_dir runs [lindex [split $obj :] end]] }
    default { return "" }
  }
}

# ---- IP packaging
namespace eval ipx {}
proc ipx::package_project {args} { lassign [stub_parse $args] f pos; stub_record ipx::package_project \
  [dict get $f -vendor] [dict get $f -library] }
proc ipx::current_core {args} { return core:current }
foreach kind {bus_interfaces memory_maps address_spaces} {
  proc ipx::get_$kind {args} {
    lassign [stub_parse $args] f pos
    if {[llength $pos] > 0} { return busif:[lindex $pos 0] }
    return {}
  }
}
foreach kind {bus_interface memory_map address_space} { proc ipx::remove_$kind {args} { stub_record ipx::remove {*}$args } }
proc ipx::add_bus_interface {name core} { stub_record ipx::add_bus_interface $name; return busif:$name }
proc ipx::add_port_map {logical bi} { stub_record ipx::add_port_map $bi $logical; return portmap:$bi:$logical }
proc ipx::add_bus_parameter {name bi} { stub_record ipx::add_bus_parameter $bi $name; return param:$bi:$name }
proc ipx::add_address_space {name core} { stub_record ipx::add_address_space $name; return as:$name }
proc ipx::add_memory_map {name core} { stub_record ipx::add_memory_map $name; return mm:$name }
proc ipx::add_address_block {name mm} { stub_record ipx::add_address_block $mm $name; return ab:$mm:$name }
proc ipx::add_register {name ab} { stub_record ipx::add_register $ab $name; return reg:$ab:$name }
foreach step {create_xgui_files update_checksums check_integrity save_core} {
  proc ipx::$step {args} [list stub_record ipx::$step]
}

# ---- block designs
proc get_ipdefs {args} { lassign [stub_parse $args] f pos; return [string map {* 9.9} [lindex $pos 0]] }
proc get_board_parts {args} {
  lassign [stub_parse $args] f pos
  set found {}
  foreach p $::stub_board_parts { if {[string match [lindex $pos 0] $p]} { lappend found $p } }
  return $found
}
proc create_bd_design {name} { set ::stub_bd $name; stub_record create_bd_design $name }
proc create_bd_cell {args} {
  lassign [stub_parse $args] f pos
  set name [lindex $pos 0]
  dict set ::stub_cells $name [dict get $f -vlnv]
  stub_record create_bd_cell $name [dict get $f -vlnv]
  return cell:$name
}
proc get_bd_cells {path} { stub_cell_of $path; return cell:$path }
proc apply_bd_automation {args} { lassign [stub_parse $args] f pos; stub_record apply_bd_automation [dict get $f -rule] {*}$pos }
proc create_bd_intf_port {args} {
  lassign [stub_parse $args] f pos
  stub_record create_bd_intf_port [lindex $pos 0] [dict get $f -vlnv]
  return port:[lindex $pos 0]
}
proc get_bd_intf_ports {name} { return port:$name }
proc get_bd_intf_pins {path} { stub_cell_of $path; return intf:$path }
proc get_bd_pins {path} { stub_cell_of $path; return pin:$path }
proc connect_bd_intf_net {args} { lassign [stub_parse $args] f pos; stub_record connect_bd_intf_net {*}$pos }
proc connect_bd_net {args} { lassign [stub_parse $args] f pos; stub_record connect_bd_net {*}$pos }
proc get_bd_addr_spaces {path} { stub_cell_of $path; return space:$path }
proc get_bd_addr_segs {path} { stub_cell_of $path; return seg:$path }
proc assign_bd_address {args} {
  lassign [stub_parse $args] f pos
  stub_record assign_bd_address [dict get $f -target_address_space] [dict get $f -offset] [dict get $f -range] {*}$pos
}
proc validate_bd_design {args} { stub_record validate_bd_design }
proc save_bd_design {args} { stub_record save_bd_design }
proc make_wrapper {args} { stub_record make_wrapper }

# ---- runs: an implementation "writes" a stand-in bitstream and hardware handoff where the script looks
proc generate_target {args} {
  file mkdir $::stub_dir
  set h [open [file join $::stub_dir $::stub_bd.hwh] w]; puts $h "stub hwh"; close $h
  stub_record generate_target
}
proc get_runs {name} { return run:$name }
proc launch_runs {args} {
  lassign [stub_parse $args] f pos
  set run [lindex $pos 0]
  stub_record launch_runs $run [expr {[dict exists $f -to_step] ? [dict get $f -to_step] : ""}]
  if {$run eq "impl_1"} {
    set d [file join $::stub_dir runs impl_1]
    file mkdir $d
    set h [open [file join $d ${::stub_bd}_wrapper.bit] w]; puts $h "stub bitstream"; close $h
  }
}
proc wait_on_run {args} { return "" }

source [lindex $argv 0]
stub_record done
close $::stub_log
