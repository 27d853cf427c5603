; TypeScript / TSX / JavaScript extraction query, in the tree-sitter tags conventions.
;
; Captures read by src/extract:
;   @definition.<kind>  the node of an entity (class, interface, enum, function,
;                       method, field)
;   @name               the entity's or the call's name
;   @value              for a field: its initializer (an arrow function or function
;                       expression makes the field a method)
;   @reference.call     a call; with @name, optional @receiver and @arguments
;   @reference.new      `new C(...)`; @name is the class
;   @import             an import statement or an `export ... from` re-export
;   @export.default     an `export default`; its @name is the exported entity
;   @base.owner / @base a class or interface and one of its bases as written

(class_declaration name: (_) @name) @definition.class
(abstract_class_declaration name: (_) @name) @definition.class
(class name: (_) @name) @definition.class
(interface_declaration name: (_) @name) @definition.interface
(enum_declaration name: (_) @name) @definition.enum
(function_declaration name: (_) @name) @definition.function
(generator_function_declaration name: (_) @name) @definition.function

(variable_declarator
  name: (identifier) @name
  value: [(arrow_function) (function_expression)]) @definition.function

(method_definition name: (_) @name) @definition.method
(method_signature name: (_) @name) @definition.method
(abstract_method_signature name: (_) @name) @definition.method
(public_field_definition name: (_) @name value: (_)? @value) @definition.field

(call_expression
  function: (identifier) @name
  arguments: (_) @arguments) @reference.call

(call_expression
  function: (member_expression
    object: (_) @receiver
    property: (_) @name)
  arguments: (_) @arguments) @reference.call

(new_expression
  constructor: (identifier) @name
  arguments: (_)? @arguments) @reference.new

(export_statement "default" declaration: [
  (function_declaration name: (_) @name)
  (generator_function_declaration name: (_) @name)
  (class_declaration name: (_) @name)
  (abstract_class_declaration name: (_) @name)
]) @export.default
(export_statement "default" value: (identifier) @name) @export.default

(import_statement) @import
(export_statement source: (_)) @import

(class_declaration (class_heritage (extends_clause value: (_) @base))) @base.owner
(class_declaration (class_heritage (implements_clause (_) @base))) @base.owner
(abstract_class_declaration (class_heritage (extends_clause value: (_) @base))) @base.owner
(abstract_class_declaration (class_heritage (implements_clause (_) @base))) @base.owner
(interface_declaration (extends_type_clause (_) @base)) @base.owner
