; Java extraction query, in the tree-sitter tags conventions.
;
; Captures read by src/extract:
;   @definition.<kind>  the node of an entity (class, interface, enum, method, field)
;   @name               the entity's or the call's name
;   @reference.call     a method call; with @name, optional @receiver and @arguments
;   @reference.new      `new C(...)`; @name is the type
;   @import             an import declaration
;   @package            the package declaration
;   @base.owner / @base a type and one of its superclasses or interfaces
;   @var.type / @var.name  a declared type of a parameter, local variable or field,
;                       used to resolve `x.m()` (src/extract/java.rs)
;
; This query is the specification: an index finds the same matches in one walk over the
; tree (`java::tags`), and the test `walk_finds_what_the_query_finds` holds the walk to
; this query (a change here needs the same change there; a query given by
; REPROAGENT_QUERIES runs as a query).

(class_declaration name: (identifier) @name) @definition.class
(record_declaration name: (identifier) @name) @definition.class
(interface_declaration name: (identifier) @name) @definition.interface
(enum_declaration name: (identifier) @name) @definition.enum
(annotation_type_declaration name: (identifier) @name) @definition.interface
(method_declaration name: (identifier) @name) @definition.method
(constructor_declaration name: (identifier) @name) @definition.method
(compact_constructor_declaration name: (identifier) @name) @definition.method
(field_declaration declarator: (variable_declarator name: (identifier) @name) @definition.field)
(constant_declaration declarator: (variable_declarator name: (identifier) @name) @definition.field)

(method_invocation
  object: (_)? @receiver
  name: (identifier) @name
  arguments: (argument_list) @arguments) @reference.call

(object_creation_expression
  type: (_) @name
  arguments: (argument_list) @arguments) @reference.new

(import_declaration) @import
(package_declaration) @package

(class_declaration superclass: (superclass (_) @base)) @base.owner
(class_declaration interfaces: (super_interfaces (type_list (_) @base))) @base.owner
(enum_declaration interfaces: (super_interfaces (type_list (_) @base))) @base.owner
(record_declaration interfaces: (super_interfaces (type_list (_) @base))) @base.owner
(interface_declaration (extends_interfaces (type_list (_) @base))) @base.owner

(formal_parameter type: (_) @var.type name: (identifier) @var.name)
(spread_parameter (_) @var.type (variable_declarator name: (identifier) @var.name))
(local_variable_declaration type: (_) @var.type declarator: (variable_declarator name: (identifier) @var.name))
(field_declaration type: (_) @var.type declarator: (variable_declarator name: (identifier) @var.name))
(enhanced_for_statement type: (_) @var.type name: (identifier) @var.name)
(catch_formal_parameter (catch_type (_) @var.type) name: (identifier) @var.name)
